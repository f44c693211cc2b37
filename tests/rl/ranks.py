"""Ranks for the distributed tests: spawned processes joined as one run on CPU (gloo), as the job
runner's ranks are. Nothing here imports Django, so a spawned rank can unpickle the work it is given."""

import io
import multiprocessing
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from trainer.rl import TrainConfig, Trainer
from trainer.rl.distributed import HOST, Ranks


def run_ranks(world, work, *args, timeout_s=120):
    """Run work(ranks, *args) in `world` spawned processes joined as one run on CPU (gloo); return
    their results in rank order (anything torch.save keeps). `work` is a module-level function and
    `args` are picklable: a spawned process gets them by pickle."""
    store = dist.TCPStore(HOST, 0, world, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_rank, args=(rank, world, store.port, work, args, results, timeout_s),
                                 daemon=True) for rank in range(world)]
    for process in processes:
        process.start()
    try:
        got = {}
        for _ in range(world):
            rank, payload = results.get(timeout=timeout_s)
            if isinstance(payload, str):
                raise AssertionError(f"rank {rank} failed:\n{payload}")
            got[rank] = torch.load(io.BytesIO(payload), weights_only=False)
        return [got[rank] for rank in range(world)]
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def _rank(rank, world, port, work, args, results, timeout_s):
    ranks = Ranks(rank, world, "cpu")
    try:
        torch.set_num_threads(1)
        store = dist.TCPStore(HOST, port, world, is_master=False, timeout=timedelta(seconds=timeout_s))
        ranks.join(store, timeout_s)
        buffer = io.BytesIO()
        torch.save(work(ranks, *args), buffer)  # bytes: tensors in the queue would be shared memory of a gone process
        results.put((rank, buffer.getvalue()))
    except BaseException:  # noqa: BLE001 - whatever a rank raised goes back to the test
        results.put((rank, traceback.format_exc()))
    finally:
        ranks.leave()



def train(ranks, config, models_dir, steps):
    """A rank's share of `steps` training steps of `config` (a dict): its policy and each step's metrics."""
    trainer = Trainer(TrainConfig.from_dict(config), models_dir, ranks=ranks)
    metrics = [trainer.train_step().metrics for _ in range(steps)]
    return {"model": trainer.policy.state_dict(), "metrics": metrics}

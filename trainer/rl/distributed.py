"""One run on W devices: W processes ("ranks") training one policy together under torch.distributed.

Rank 0 is the process that owns the run (the job runner's); it starts ranks
1..W-1 as subprocesses (`python -m trainer.rl.distributed`, see `Leader`),
rendezvous on 127.0.0.1 (a TCPStore on a free port) and one process group: gloo
on CPU, NCCL on CUDA (rank r on cuda:r), with a gloo group beside NCCL for the
small messages. A step on W ranks:

    prompts     every rank draws the step's P prompts from the prompt generator, whose state is the
                same on every rank, and keeps its share, whole groups: rank r the prompts
                [r*P//W, (r+1)*P//W)
    rollout     each rank samples G completions per prompt with its own sample generator
    advantages  per group, on the rank that holds it (a group is never split)
    update      the minibatches are drawn over the step's whole batch (the same permutation on
                every rank); each rank's loss is the sum over its tokens of the minibatch divided
                by the minibatch's sampled tokens on all ranks, and the gradients are summed
                (all-reduce): the gradient of the combined batch's token mean, however the tokens
                fall between ranks; clipping and AdamW then do the same on every rank, whose
                weights stay equal
    log         every rank's rows are gathered, so the metrics are the whole batch's

Evaluation is rank 0's alone; a checkpoint is written by rank 0 and holds every
rank's RNG states, so a resume repeats an uninterrupted run of W ranks exactly.
Rank 0 tells the others what comes next (`STEP`, `SAVE`, `END`, broadcast), so
all ranks stop at the same step. A rank that dies breaks the next collective at
once (the peer's socket closes); one that hangs, after the group's timeout;
rank 0 then names the rank and its last words (`RankFailed`). Ranks 1..W-1 end
when rank 0 says END, when rank 0's process is gone, or when rank 0 kills them.

The same result as one process on the combined batch, up to the order of
floating-point sums (about 1e-7 relative); the sampled completions differ, since
each rank samples with its own generator. Nothing here imports Django.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.rl.trainer import Trainer

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]  # where `python -m trainer.rl.distributed` imports from

# What rank 0 tells the others to do next.
STEP, SAVE, END = 1, 2, 3

END_WAIT_S = 30.0  # how long the ranks may take to exit after END before they are killed
DEAD_WAIT_S = 5.0  # after a failed collective: how long a dying rank may take to be seen dead
READY_POLL_S = 0.1


class RankFailed(RuntimeError):
    """Another rank of the run died, or never started; the message names it and its last output."""


class Ranks:
    """This process's place among the W processes of one run, and the collectives the trainer uses.

    Made before the process group is up (the trainer's random streams depend on the rank);
    `join` brings it up, `leave` takes it down.
    """

    def __init__(self, rank: int, world: int, device: str):
        self.rank, self.world, self.device = rank, world, device
        self.backend = "nccl" if device.startswith("cuda") else "gloo"
        self.control = None  # the gloo group for orders and objects (None: the default group is gloo)

    # -- the group --------------------------------------------------------------
    def join(self, store: dist.Store, timeout_s: float) -> None:
        """Say this rank is ready (built), then form the process group with the others."""
        timeout = datetime.timedelta(seconds=timeout_s)
        if self.rank:
            store.set(f"ready/{self.rank}", "1")
        if self.backend == "nccl":
            torch.cuda.set_device(torch.device(self.device))
        dist.init_process_group(self.backend, store=store, rank=self.rank, world_size=self.world, timeout=timeout)
        if self.backend == "nccl":
            self.control = dist.new_group(backend="gloo", timeout=timeout)

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self.control = None

    # -- sharing a step -----------------------------------------------------------
    def share(self, n: int) -> tuple[int, int]:
        """This rank's [first, last) of n items (prompts), in rank order, sizes within one of each other."""
        return self.rank * n // self.world, (self.rank + 1) * n // self.world

    @staticmethod
    def mine(rows: torch.Tensor, first: int, count: int) -> torch.Tensor:
        """Of `rows` (indices into the step's batch), those held here, as indices into this rank's
        `count` rows starting at `first`."""
        here = (rows >= first) & (rows < first + count)
        return rows[here] - first

    # -- collectives ---------------------------------------------------------------
    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Return `tensor` summed over every rank (in place)."""
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def sum_gradients(self, module: torch.nn.Module) -> None:
        """Replace every parameter's gradient by its sum over the ranks (one all-reduce)."""
        params = [p for p in module.parameters() if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = self.sum(torch.cat([g.reshape(-1) for g in grads]))
        for p, g in zip(params, flat.split([g.numel() for g in grads])):
            p.grad = g.view_as(p)

    def gather(self, obj) -> list:
        """Return every rank's `obj` (picklable), in rank order, on every rank."""
        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def order(self, what: int) -> int:
        """Rank 0: tell the others `what` comes next; the others: wait for it and return it."""
        box = torch.tensor([what if self.rank == 0 else 0], dtype=torch.long)
        dist.broadcast(box, src=0, group=self.control)
        return int(box.item())


class Leader:
    """Rank 0's side of a run on several devices: it starts ranks 1..W-1, joins them, and drives them.

    The owner of the run uses it like a Trainer (`step`, `train_step`, `evaluate`, `save_checkpoint`),
    inside a `with`: leaving it ends the other ranks (END when all went well, killed otherwise) and
    the process group.

        with Leader(devices, origin, threads=t, timeout_s=s) as leader:
            ... leader.pids: the other ranks' processes ...
            leader.join(Trainer.from_origin(origin, devices[0], leader.ranks))
            leader.train_step(); leader.save_checkpoint(path)
    """

    def __init__(self, devices: list[str], origin: dict, *, threads: int, timeout_s: float):
        self.world = len(devices)
        self.devices = devices
        self.timeout_s = timeout_s
        self.ranks = Ranks(0, self.world, devices[0])
        self.trainer = None
        self.store = dist.TCPStore(HOST, 0, self.world, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=timeout_s))
        self.processes: list[subprocess.Popen] = []
        self.outputs = []  # each rank's stdout and stderr, read back when it fails
        try:
            for rank in range(1, self.world):
                out = tempfile.TemporaryFile()
                self.outputs.append(out)
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "trainer.rl.distributed", "--rank", str(rank), "--world", str(self.world),
                     "--port", str(self.store.port), "--device", devices[rank], "--threads", str(threads),
                     "--timeout-s", str(timeout_s), "--origin", json.dumps(origin)],
                    cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                ))
        except BaseException:
            self._kill()
            raise

    @property
    def pids(self) -> list[int]:
        """The process ids of ranks 1..W-1."""
        return [p.pid for p in self.processes]

    def join(self, trainer) -> None:
        """Wait for every rank to have built its trainer, then form the process group; rank 0 trains `trainer`.

        Raise RankFailed when a rank exits first or is not ready within the timeout."""
        deadline = time.monotonic() + self.timeout_s
        waiting = set(range(1, self.world))
        while waiting:
            self._check()
            waiting = {r for r in waiting if not self.store.check([f"ready/{r}"])}
            if waiting and time.monotonic() > deadline:
                raise RankFailed(f"rank {min(waiting)} of {self.world} was not ready within {self.timeout_s:.0f} s"
                                 f"{self._last_words(min(waiting))}")
            if waiting:
                time.sleep(READY_POLL_S)
        self._collective(self.ranks.join, self.store, self.timeout_s)
        self.trainer = trainer

    # -- what the runner calls ------------------------------------------------------
    @property
    def step(self) -> int:
        return self.trainer.step

    def train_step(self):
        self._collective(self.ranks.order, STEP)
        return self._collective(self.trainer.train_step)

    def evaluate(self) -> dict:
        return self.trainer.evaluate()  # rank 0 alone; the others wait for the next order

    def save_checkpoint(self, path: Path) -> None:
        self._collective(self.ranks.order, SAVE)
        self._collective(self.trainer.save_checkpoint, path)

    # -- ending ----------------------------------------------------------------------------
    def __enter__(self) -> "Leader":
        return self

    def __exit__(self, kind, error, tb) -> None:
        self.close(ended_well=kind is None)

    def close(self, ended_well: bool = True) -> None:
        """End the other ranks and the process group: END and wait when all went well, else kill them."""
        try:
            if ended_well and self.trainer is not None:
                self.ranks.order(END)
                for process in self.processes:
                    process.wait(timeout=END_WAIT_S)
        except Exception as err:  # noqa: BLE001 - the run is over either way: what is left is killed below
            log.warning("the other ranks did not end cleanly: %s; killing what is left", err)
        finally:
            self._kill()
            self.ranks.leave()

    def _kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        for out in self.outputs:
            out.close()
        self.outputs = []

    # -- failures --------------------------------------------------------------------------
    def _collective(self, fn, *args):
        """Call fn; when it fails because another rank died, raise RankFailed naming that rank instead."""
        try:
            return fn(*args)
        except Exception as err:
            deadline = time.monotonic() + DEAD_WAIT_S
            while time.monotonic() < deadline and all(p.poll() is None for p in self.processes):
                time.sleep(0.05)
            self._check(cause=err)
            raise

    def _check(self, cause: Exception | None = None) -> None:
        """Raise RankFailed when a rank has exited (before END)."""
        for rank, process in enumerate(self.processes, start=1):
            code = process.poll()
            if code is not None:
                how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                step = "" if self.trainer is None else f" at step {self.trainer.step}"
                raise RankFailed(f"rank {rank} of {self.world} (pid {process.pid}, {self.devices[rank]}) {how}"
                                 f"{step}{self._last_words(rank)}") from cause

    def _last_words(self, rank: int, limit: int = 600) -> str:
        """The end of a rank's output, for the error ("" when it said nothing)."""
        out = self.outputs[rank - 1] if rank - 1 < len(self.outputs) else None
        if out is None:
            return ""
        out.seek(0, os.SEEK_END)
        out.seek(max(0, out.tell() - limit))
        text = out.read().decode(errors="replace").strip()
        lines = [line for line in text.splitlines() if line.strip()]
        return f"; its last output: {lines[-1].strip()}" if lines else ""


def follow(trainer, ranks: Ranks) -> None:
    """Ranks 1..W-1: do what rank 0 orders until END."""
    while True:
        what = ranks.order(0)
        if what == STEP:
            trainer.train_step()
        elif what == SAVE:
            trainer.state_dict()  # its part in gathering every rank's RNG states; rank 0 writes the file
        elif what == END:
            return
        else:
            raise RuntimeError(f"unknown order {what} from rank 0")


def _exit_with_parent() -> None:
    """End this process when the one that started it (rank 0) is gone, whatever this one is doing."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-rank-0", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    """Rank r > 0 of a run: build the trainer from the same origin as rank 0, join, follow."""
    parser = argparse.ArgumentParser(prog="python -m trainer.rl.distributed", description=main.__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True, help="rank 0's TCPStore on 127.0.0.1")
    parser.add_argument("--device", required=True, help="cpu or cuda:N")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of this rank")
    parser.add_argument("--timeout-s", dest="timeout_s", type=float, default=300.0)
    parser.add_argument("--origin", required=True, help="JSON: where the run starts (Trainer.from_origin)")
    args = parser.parse_args(argv)

    # Rank 0 decides when the run ends: Ctrl-C or a warm shutdown sent to the whole process group
    # stops the job at a step boundary through rank 0, which then ends this rank.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with_parent()

    ranks = Ranks(args.rank, args.world, args.device)
    store = dist.TCPStore(HOST, args.port, args.world, is_master=False,
                          timeout=datetime.timedelta(seconds=args.timeout_s))
    trainer = Trainer.from_origin(json.loads(args.origin), args.device, ranks)
    torch.set_num_threads(max(1, args.threads))
    ranks.join(store, args.timeout_s)
    try:
        follow(trainer, ranks)
    finally:
        ranks.leave()


if __name__ == "__main__":
    main()

"""Where a job runs: the jobs workers announce what they have, and each job goes to one that can run it.

Each jobs worker writes a `Worker` row when it is ready (its node, its team pool, the cores it may use,
its GPUs and the devices torch sees, the queues it consumes), refreshes it every Worker.REPORT_EVERY_S
from a thread of its main process and at every job it runs, and deletes it when it shuts down (signals
wired in trainer/tasks.py).

A jobs worker consumes its own queue, named as the worker (`jobs@<node>`), and, unless it serves a team
pool, the shared queue `jobs`. `place` decides where a job goes:

- a job that asks for nothing in particular (device auto or cpu, one device, any node, no pool) goes
  to the shared queue: whichever shared worker is free first takes it;
- a job that asks for a device kind, several devices, a node or a pool goes to the own queue of the
  least busy live worker that has all of it;
- a job that no live worker can run is refused at once, naming what the workers have (with no jobs
  worker reported at all, only the first kind is accepted: it waits for one in the shared queue).
"""

import logging
import os
import threading
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from trainer.kinds import kinds
from trainer.models import ACTIVE, Job, Status, Worker
from yardstick.inputs import InputError

log = logging.getLogger(__name__)


class DeviceUnavailable(RuntimeError):
    """The device a job asks for is not on the node that runs it: resuming there would fail again."""


def jobs_queue():
    """The shared queue run_job is routed to (settings.CELERY_TASK_ROUTES)."""
    return settings.CELERY_TASK_ROUTES.get("trainer.tasks.run_job", {}).get("queue", "jobs")


def worker_name(node):
    """A node's jobs worker's Celery name, which is also the name of its own queue."""
    return f"{jobs_queue()}@{node}"


# A node's launch worker (launch/: recipes' commands, in threads) is named and queued "launch@<node>"; it reports
# itself as the jobs workers do, but runs no embedded job.
LAUNCH_PREFIX = "launch@"


def is_jobs_worker(worker):
    return (jobs_queue() in worker.queues or worker.name in worker.queues) and not worker.name.startswith(LAUNCH_PREFIX)


def live_workers(now=None):
    """The live workers that run jobs: the jobs workers and the launch workers."""
    return [w for w in Worker.live(now=now) if is_jobs_worker(w) or w.name.startswith(LAUNCH_PREFIX)]


def live_jobs_workers(now=None):
    return [w for w in Worker.live(now=now) if is_jobs_worker(w)]


def local_devices():
    """The devices torch sees in this process: ["cpu"], then "cuda:N" for each GPU.

    torch.cuda.device_count() asks NVML when it can, which leaves CUDA uninitialised: a Celery
    main process may call this and still fork pool processes that use the GPUs.
    """
    import torch

    return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def local_cores():
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0))


def local_gpus():
    """[{"index", "uuid", "name", "memory_mib"}] of this machine's NVIDIA GPUs, from NVML (which, unlike
    torch's device properties, does not initialise CUDA in a process that forks); [] without NVML.
    The index is NVML's, which is CUDA's unless CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER reorder them."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library: a machine without NVIDIA GPUs
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append({"index": index, "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                         "name": _text(pynvml.nvmlDeviceGetName(handle)),
                         "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20})
        return gpus
    except pynvml.NVMLError:
        return []
    finally:
        pynvml.nvmlShutdown()


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def has_device(devices, requested):
    """Whether a node with `devices` can run a job asking for `requested` (auto runs anywhere)."""
    if requested in ("auto", "cpu"):
        return True
    if requested == "cuda":
        return any(d.startswith("cuda:") for d in devices)
    return requested in devices


def capacity(worker, requested):
    """How many of the `requested` kind of device a job may use at once on `worker`: cores for cpu
    (one process each), GPUs for cuda, 1 or 0 for one named GPU; auto is cuda where there are GPUs."""
    gpus = sum(d.startswith("cuda:") for d in worker.devices)
    if requested == "auto":
        requested = "cuda" if gpus else "cpu"
    if requested == "cpu":
        return max(worker.cores, 1)
    if requested == "cuda":
        return gpus
    return int(requested in worker.devices)


def with_devices(worker):
    """A worker's row for the API, with what every kind's jobs hold of it and what is free."""
    held = held_by(worker)
    gpus, cores = free_devices(worker, held)
    return {**worker.to_dict(), "held": {"gpus": {str(i): j for i, j in sorted(held["gpus"].items())},
                                         "cores": {str(j): n for j, n in held["cores"].items()}},
            "free": {"gpus": gpus, "cores": cores}, "summary": describe(worker, held)}


def offer(worker):
    """What a worker has, for people: "jobs@gpu-a on gpu-a: 16 cores, 2 × NVIDIA H200 (cuda:0, cuda:1), shared"."""
    gpus = [d for d in worker.devices if d.startswith("cuda:")]
    names = sorted({g.get("name", "") for g in worker.gpus} - {""})
    kit = [f"{worker.cores} cores"] if worker.cores else []
    if gpus:
        kit.append(f"{len(gpus)} × {' / '.join(names) or 'CUDA GPU'} ({', '.join(gpus)})")
    kit = ", ".join(kit) or "cpu"
    return f"{worker.name} on {worker.host}: {kit}, {'pool ' + worker.team if worker.team else 'shared'}"


@dataclass(frozen=True)
class Placement:
    queue: str  # where run_job is sent
    worker: str  # the worker chosen, "" for the shared queue


def constrained(device="auto", devices=1, node="", pool=""):
    """Whether a job asks for more than any worker has (then it needs a chosen worker)."""
    return device not in ("auto", "cpu") or devices > 1 or bool(node) or bool(pool)


def place(device="auto", devices=1, node="", pool="", now=None):
    """The Placement of a job asking for `devices` × `device` (on `node`, in `pool`): see the module
    docstring. Raise InputError naming the field nobody can meet (pool, node, device or devices) and
    what the live jobs workers have."""
    workers = live_jobs_workers(now)
    want = f"{devices} × {device}" if devices > 1 else f"device {device}"
    if not workers:
        if not constrained(device, devices, node, pool):
            return Placement(jobs_queue(), "")
        field = "pool" if pool else "node" if node else "devices" if devices > 1 else "device"
        raise InputError(field, f"no jobs worker has reported, so nobody can run {want}{_where(node, pool)}: "
                                "start one on a node (`manage.py up --role jobs,collector`), or use device auto "
                                "without node or pool to wait in the shared queue")
    have = "; ".join(offer(w) for w in workers)
    candidates = workers
    for field, keep in (("pool", lambda w: w.team == pool), ("node", lambda w: not node or w.host == node),
                        ("device", lambda w: capacity(w, device) >= 1),
                        ("devices", lambda w: capacity(w, device) >= devices)):
        kept = [w for w in candidates if keep(w)]
        if not kept:
            raise InputError(field, f"{_refused(field, want, node, pool)}: workers have {have}; "
                                    f"{_instead(field)}")
        candidates = kept
    if not constrained(device, devices, node, pool):
        return Placement(jobs_queue(), "")
    busy = {w.name: Job.objects.filter(placed_on=w.name, status__in=[Status.QUEUED, *ACTIVE]).count()
            for w in candidates}
    chosen = min(candidates, key=lambda w: (busy[w.name], w.name))
    return Placement(chosen.name, chosen.name)


def _where(node, pool):
    return (f" on node {node}" if node else "") + (f" in pool {pool}" if pool else "")


def _refused(field, want, node, pool):
    if field == "pool":
        return f"no jobs worker serves pool {pool}" if pool else "every jobs worker serves a team pool"
    if field == "node":
        return f"no jobs worker is on node {node}{_where('', pool)}"
    if field == "device":
        return f"device {want.rpartition(' ')[2]} is not on any jobs worker{_where(node, pool)}"
    return f"no jobs worker{_where(node, pool)} has {want}"


def _instead(field):
    return {"pool": "use one of their pools, or none for the shared workers",
            "node": "use one of their nodes, or none for any",
            "device": "use auto or one of those",
            "devices": "ask for at most what one worker has"}[field]


def gpu_indices(worker):
    """The GPUs of `worker`'s node by NVML index: NVML's list, else (no NVML there) the cuda devices torch sees."""
    return sorted(g["index"] for g in worker.gpus if g.get("index") is not None) or sorted(
        int(d.partition(":")[2]) for d in worker.devices if d.startswith("cuda:"))


def free_devices(worker, held=None):
    """(free GPU indices, free cores) of `worker` now: its GPUs and cores less what every kind's jobs hold on its
    node (a node's jobs worker and launch worker share its GPUs)."""
    held = held or held_by(worker)
    gpus = [i for i in gpu_indices(worker) if i not in held["gpus"]]
    return gpus, max(0, worker.cores - sum(held["cores"].values()))


def held_by(worker):
    """What every kind's jobs hold on `worker`'s node: {"gpus": {NVML index: job id}, "cores": {job id: cores}}."""
    return held_on_nodes([worker])[worker.host]


def held_on_nodes(workers):
    """{node: what every kind's jobs hold there} for the nodes of `workers`, one query or so a kind."""
    out = {w.host: {"gpus": {}, "cores": {}} for w in workers}
    for kind in kinds():
        for host, held in kind.held_on(workers).items():
            out[host]["gpus"].update(held["gpus"])
            out[host]["cores"].update(held["cores"])
    return out


def describe(worker, held=None):
    """What a worker has and holds, for people: "launch@gpu-a: GPUs 0, 1 free of 2; 14 of 16 cores free"."""
    held = held or held_by(worker)
    gpus, cores = free_devices(worker, held)
    taken = ", ".join(f"{i} (job {j})" for i, j in sorted(held["gpus"].items()))
    gpu_text = (f"GPUs {', '.join(map(str, gpus)) or 'none'} free of {len(worker.gpus)}"
                + (f", held: {taken}" if taken else "")) if worker.gpus else "no GPUs"
    return f"{worker.name}: {gpu_text}; {cores} of {worker.cores} cores free"


def device_refusal(requested, devices=1):
    """Why `manage.py train` (which trains in its own process) cannot run `devices` × `requested` here,
    for people; "" when it can."""
    here = local_devices()
    if not has_device(here, requested):
        return (f"device {requested} is not on this machine: torch sees {', '.join(here)} "
                f"({settings.YARDSTICK_NODE}); use auto or one of those")
    me = Worker(name="here", devices=here, cores=local_cores())
    if capacity(me, requested) < devices:
        return (f"{devices} × {requested} is more than this machine has: {capacity(me, requested)} "
                f"({settings.YARDSTICK_NODE}: {', '.join(here)}, {local_cores()} cores)")
    return ""


# -- the worker's side ----------------------------------------------------------------


def report(name, queues, started_at=None):
    """Write this worker's row now: what it has, where, for whom, since when (`started_at`, its process's first
    report). A launch worker trains nothing itself: its devices are NVML's GPUs, without loading torch (seconds of
    CPU at every start) to count them."""
    gpus = local_gpus()
    devices = ["cpu", *(f"cuda:{g['index']}" for g in gpus)] if name.startswith(LAUNCH_PREFIX) else local_devices()
    return Worker.report(name, settings.YARDSTICK_NODE, queues, devices, team=settings.YARDSTICK_POOL,
                         cores=local_cores(), gpus=gpus, started_at=started_at)


def refresh(name):
    """Mark this worker seen now, from the process about to run a job (its devices may have changed)."""
    Worker.objects.filter(name=name).update(seen_at=timezone.now(), devices=local_devices(), cores=local_cores())


def forget(name):
    Worker.objects.filter(name=name).delete()


class Heartbeat:
    """Beat for a job from a thread while the worker lives, so a long step is not taken for a crash.

    A killed process stops beating with it; that is what the crash detector looks for.
    """

    def __init__(self, job, interval_s):
        self.job = job
        self.interval_s = interval_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"heartbeat-job-{job.pk}", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopped.set()
        self.thread.join(timeout=10)

    def _loop(self):
        try:
            while not self.stopped.wait(self.interval_s):
                try:
                    if not self.job.beat():
                        return
                except Exception as err:  # noqa: BLE001 - a database blip: the next beat may get through
                    log.warning("heartbeat of job %s not written: %s", self.job.pk, err)
                    close_old_connections()
        finally:
            connection.close()  # this thread's own connection


class _Report:
    """This worker as runner.Heartbeat sees a job: each beat reports it again (so one loop serves both)."""

    def __init__(self, name, queues, started_at):
        self.pk, self.queues, self.started_at = name, list(queues), started_at

    def beat(self):
        report(self.pk, self.queues, self.started_at)
        return True


def start_reporting(name, queues, every_s=None):
    """Report the worker now, then every Worker.REPORT_EVERY_S from a daemon thread; return it (`.stop()`)."""
    started_at = report(name, queues, started_at=timezone.now()).started_at
    return Heartbeat(_Report(name, queues, started_at), Worker.REPORT_EVERY_S if every_s is None else every_s).start()

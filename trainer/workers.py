"""Which devices the jobs workers have, so a job asking for one nobody has is refused at start.

Each Celery worker writes a `Worker` row when it is ready (the devices torch sees in it, the
queues it consumes), refreshes it every Worker.REPORT_EVERY_S from a thread of its main process
and at every job it runs, and deletes it when it shuts down (signals wired in trainer/tasks.py).
`device_refusal` is the rule `Job.start` asks: a device no live jobs worker has is refused with
the devices they do have; with no worker reported at all, a job is accepted and waits in the queue.
"""

from django.conf import settings
from django.utils import timezone

from trainer.models import Worker


class DeviceUnavailable(RuntimeError):
    """The device a job asks for is not on the node that runs it: resuming there would fail again."""


def jobs_queue():
    """The queue run_job is routed to (settings.CELERY_TASK_ROUTES)."""
    return settings.CELERY_TASK_ROUTES.get("trainer.tasks.run_job", {}).get("queue", "jobs")


def local_devices():
    """The devices torch sees in this process: ["cpu"], then "cuda:N" for each GPU.

    torch.cuda.device_count() asks NVML when it can, which leaves CUDA uninitialised: a Celery
    main process may call this and still fork pool processes that use the GPUs.
    """
    import torch

    return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def has_device(devices, requested):
    """Whether a node with `devices` can run a job asking for `requested` (auto runs anywhere)."""
    if requested in ("auto", "cpu"):
        return True
    if requested == "cuda":
        return any(d.startswith("cuda:") for d in devices)
    return requested in devices


def device_refusal(requested, runs_here=False):
    """Why a job asking for `requested` cannot run, for people; "" when it can (or nobody can tell yet).

    runs_here: the job runs in this process (`manage.py train`): ask torch here, not the workers.
    """
    if has_device([], requested):
        return ""
    if runs_here:
        devices = local_devices()
        if has_device(devices, requested):
            return ""
        return (f"device {requested} is not on this machine: torch sees {', '.join(devices)} "
                f"({settings.YARDSTICK_NODE}); use auto or one of those")
    workers = list(Worker.live(jobs_queue()))
    if not workers or any(has_device(w.devices, requested) for w in workers):
        return ""  # no worker has reported yet: the job waits in the queue for one
    have = "; ".join(f"{', '.join(w.devices)} ({w.host})" for w in workers)
    return f"device {requested} is not on any jobs worker: workers have {have}; use auto or one of those"


# -- the worker's side ----------------------------------------------------------------


def report(name, queues):
    """Write this worker's row now."""
    return Worker.report(name, settings.YARDSTICK_NODE, queues, local_devices())


def refresh(name):
    """Mark this worker seen now, from the process about to run a job (its devices may have changed)."""
    Worker.objects.filter(name=name).update(seen_at=timezone.now(), devices=local_devices())


def forget(name):
    Worker.objects.filter(name=name).delete()


class _Report:
    """This worker as runner.Heartbeat sees a job: each beat reports it again (so one loop serves both)."""

    def __init__(self, name, queues):
        self.pk, self.queues = name, list(queues)

    def beat(self):
        report(self.pk, self.queues)
        return True


def start_reporting(name, queues, every_s=None):
    """Report the worker now, then every Worker.REPORT_EVERY_S from a daemon thread; return it (`.stop()`)."""
    from trainer.runner import Heartbeat  # here: trainer.runner imports this module

    report(name, queues)
    return Heartbeat(_Report(name, queues), Worker.REPORT_EVERY_S if every_s is None else every_s).start()

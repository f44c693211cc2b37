"""The guard of a launched command: no process of it outlives the launch worker that started it.

The worker starts the command as its own process group (a new session) and, beside it, this guard:

    python -m launch.guard <process group> <job id> <start mark>

with a pipe as its stdin whose other end only the worker holds. When the run ends the worker writes one byte
and the guard exits. When the worker dies instead (SIGKILL, out of memory, a crash), the kernel closes the pipe:
the guard reads end-of-file, kills the command's process group and every process whose environment carries this
start's YARDSTICK_LAUNCH_MARK (one that made a session of its own; a mark, not the job id, which another database
on the same machine may give another job), then fails the job at once, as the Celery pool does
for an embedded job whose process died. It needs no signal from the dying worker and works the same whichever of
the worker's threads started the command.

`kill_all` is also what the worker's own last stop step (SIGKILL) sends.
"""

import os
import signal
import sys

import psutil

RELEASE = b"x"  # what the worker writes when it ended the run itself


MARK = "YARDSTICK_LAUNCH_MARK"  # set in a launched command's environment: one random value per start


def processes_of(mark, pgid):
    """The live processes of one start of a launched command: its process group, and any process whose environment
    carries its mark."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid == os.getpid():
                continue
            if os.getpgid(proc.pid) == pgid or proc.environ().get(MARK) == mark:
                found.append(proc)
        except (psutil.Error, OSError):  # gone meanwhile, or another user's (whose environment is not ours to read)
            continue
    return found


def kill_all(mark, pgid, sig=signal.SIGKILL):
    """Send `sig` once to each process of the start: to its process group, and to every process carrying its mark
    that the group's signal did not reach (one that left the group); return the PIDs signalled one by one."""
    try:
        os.killpg(pgid, sig)
        grouped = True
    except (ProcessLookupError, PermissionError):
        grouped = False
    hit = []
    for proc in processes_of(mark, pgid):
        try:
            # A second SIGTERM to a process that handles the first (a trainer writing its checkpoint) may end it.
            if grouped and os.getpgid(proc.pid) == pgid:
                continue
            proc.send_signal(sig)
            hit.append(proc.pid)
        except (psutil.Error, OSError):  # gone meanwhile
            continue
    return hit


def _fail_job(job_id, pgid, worker_pid):
    """Fail the job now (a worker that died cannot): its stint of process `pgid` names it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
    # here: Django is set up only when the worker died; a guard that is released never loads it
    import django

    django.setup()
    from trainer.models import Job  # here: needs the apps django.setup() just loaded
    from yardstick.celery import start_no_more_work  # here: loaded only when the worker died, as Django is

    # It cleans up; it starts nothing (the job's end frees devices: a waiting job, a sweep's next trial). Its worker
    # may have died in a stopping `up` that now stops every part: what comes next is for the passes of the parts
    # that live (beat's, or those of the next `up`), which put it on a worker that is there.
    start_no_more_work()
    job = Job.objects.filter(pk=job_id).first()
    if job is not None:
        job.fail_worker_lost(pgid, f"its launch worker (pid {worker_pid}) died; the guard killed the run's processes")


def main(argv):
    pgid, job_id, mark = int(argv[0]), int(argv[1]), argv[2]
    worker_pid = os.getppid()
    said = sys.stdin.buffer.read(1)
    if said == RELEASE:
        return 0
    kill_all(mark, pgid)
    try:
        _fail_job(job_id, pgid, worker_pid)
    except Exception as err:  # noqa: BLE001 - the processes are dead; the heartbeat check fails the job later
        print(f"launch guard: job {job_id}'s processes were killed, but the job could not be failed: {err}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

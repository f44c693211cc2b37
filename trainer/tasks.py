"""Celery entry points for jobs: thin wrappers around trainer.runner and trainer.models."""

import logging
import threading

import psutil
from billiard.exceptions import WorkerLostError
from celery import shared_task
from celery.signals import task_failure, worker_ready, worker_shutdown, worker_shutting_down
from django.db import connection

from trainer import queue, runner, workers
from trainer.kinds import kinds
from trainer.kinds.embedded import RUN_JOB, replace_orphans
from trainer.models import Job
from yardstick.celery import shutting_down

log = logging.getLogger(__name__)


# Routed to the "jobs" queue (settings.CELERY_TASK_ROUTES). Acknowledged when done, so a
# message whose worker died is delivered again; the claim (queued → running, by row count)
# makes that redelivery a no-op for a job that is already running, failed or finished.
@shared_task(name=RUN_JOB, acks_late=True, ignore_result=True)
def run_job(job_id):
    """Run job `job_id` to its end (or until it is stopped)."""
    workers.refresh(run_job.request.hostname)
    runner.run(job_id)


@shared_task(name="trainer.tasks.detect_crashed_jobs", ignore_result=True)
def detect_crashed_jobs():
    """Fail running jobs whose worker stopped beating; return how many."""
    failed = Job.fail_crashed(runner.heartbeat_limit_s())
    for job in failed:
        log.warning("job %s failed: %s", job.pk, job.error)
    for job in replace_orphans():
        log.warning("job %s sent again, to %s: the worker it waited for stopped reporting",
                    job.pk, job.placed_on or "the shared queue")
    return len(failed)


@shared_task(name="trainer.tasks.place_waiting", ignore_result=True)
def place_waiting():
    """One pass of the placer over the line of waiting jobs (trainer/queue.py); return how many it started. None
    from a worker that is shutting down (yardstick.celery.shutting_down)."""
    if shutting_down():
        return 0
    done = queue.serve_waiting()
    return len(done.placed) if done else 0


@task_failure.connect(sender=run_job)
def fail_job_of_lost_worker(sender=None, task_id=None, exception=None, args=None, kwargs=None, **extra):
    """A pool process that died mid-job (SIGKILL, SIGSEGV, out of memory) fails its job at once.

    The worker's main process reaps the dead pool process and fails the task with
    WorkerLostError here (run_job acks late without reject_on_worker_lost, so the
    message is acknowledged, not delivered again). Without this the job would stay
    `running`, unresumable, until the heartbeat check. A failure raised inside the
    task has already been recorded by the runner; this only handles the lost process.
    """
    if not isinstance(exception, WorkerLostError):
        return
    job_id = args[0] if args else (kwargs or {}).get("job_id")
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return
    # The job's first open stint (rank 0's, on a job of several devices) names the pool process that ran
    # it; WorkerLostError says how it ended. A pid still alive is not the process that died (the job runs
    # elsewhere after a redelivery).
    stint = job.stints.filter(ended_at__isnull=True).order_by("started_at", "id").first()
    # billiard's text ends with its pool-internal " Job: <index>.", which means nothing to people.
    cause = str(exception).partition(" Job:")[0].rstrip(". ")
    if stint is not None and not psutil.pid_exists(stint.pid) and job.fail_worker_lost(stint.pid, f"Celery: {cause}"):
        log.warning("job %s failed: %s", job.pk, job.error)
    elif stint is None and job.fail_lost_before_start(f"Celery: {cause}"):
        log.warning("job %s failed: %s", job.pk, job.error)


@worker_shutting_down.connect
def stop_this_workers_jobs(sig=None, how=None, exitcode=None, **kwargs):
    """On a warm shutdown (SIGTERM from `up`, a deploy), stop our jobs at their next step.

    Celery then waits for the task to return: the job writes a checkpoint and
    ends `stopped` (resumable) instead of being killed mid-step and found
    `failed` by the heartbeat check minutes later. The signal fires in the
    worker's main process; the jobs run in its pool processes.
    """
    # The signal handler runs in the main thread between two of its bytecodes, perhaps in the middle of a query of
    # that thread's connection (its worker_ready handler placing waiting jobs): it must not use or close that one
    # (a closed connection under a running query left the worker hung, never forgotten). A thread of its own opens a
    # fresh connection, which also reaches a PostgreSQL that restarted since (`up` restarts one that died); without
    # one the stop is never asked and `up` kills the worker 30 s later, its runs failed instead of stopped.
    stopped = _in_a_thread_of_its_own(runner.request_stop_of_local_jobs, reason=f"worker shutting down ({how or sig})")
    for job_id in stopped or ():
        log.warning("job %s will stop at its next step: the worker is shutting down", job_id)


def _in_a_thread_of_its_own(fn, *args, **kwargs):
    """fn(*args, **kwargs) on a new thread's own database connection, closed after; its result, or None after an
    error (logged) or 20 s."""
    result = []

    def call():
        try:
            result.append(fn(*args, **kwargs))
        except Exception:  # noqa: BLE001 - a shutdown goes on: what was not done is logged
            log.exception("%s did not finish", fn.__name__)
        finally:
            connection.close()  # this thread's

    thread = threading.Thread(target=call, name=f"shutdown-{fn.__name__}", daemon=True)
    thread.start()
    thread.join(timeout=20)
    return result[0] if result else None


# This worker's row in trainer_worker (what devices it has), kept while it runs; see trainer/workers.py.
_reporter = {}


@worker_ready.connect
def report_this_worker(sender=None, **kwargs):
    """Say which queues this worker consumes and which devices torch sees here (jobs workers only:
    the others run no training, and need not import torch for it)."""
    name = sender.hostname
    queues = list(sender.app.amqp.queues.consume_from)
    if workers.jobs_queue() not in queues and name not in queues:
        return
    _reporter[name] = workers.start_reporting(name, queues)
    for kind in kinds():  # what was placed on this name before this process started, which it does not hold
        for job in kind.worker_started(name):
            log.warning("job %s was placed on %s before it restarted: sent again", job.pk, name)
    queue.serve_waiting()  # what waits for this worker's devices may start now
    log.info("worker %s reported: queues %s, devices %s", name, ", ".join(queues), ", ".join(workers.local_devices()))


@worker_shutdown.connect
def forget_this_worker(sender=None, **kwargs):
    """A worker that shuts down stops counting at once (a killed one, after Worker.STALE_S)."""
    name = getattr(sender, "hostname", None)
    reporter = _reporter.pop(name, None)
    if reporter is not None:
        reporter.stop()
        _in_a_thread_of_its_own(workers.forget, name)  # the main thread's connection may be mid-query or stale

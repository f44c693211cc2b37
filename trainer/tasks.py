"""Celery entry points for jobs: thin wrappers around trainer.runner and trainer.models."""

import logging

from celery import shared_task

from trainer import runner
from trainer.models import Job

log = logging.getLogger(__name__)

# How often beat should run detect_crashed_jobs (the lead wires it into CELERY_BEAT_SCHEDULE).
DETECT_CRASHED_EVERY_S = 30.0


# Routed to the "jobs" queue (settings.CELERY_TASK_ROUTES). Acknowledged when done, so a
# message whose worker died is delivered again; the claim (queued → running, by row count)
# makes that redelivery a no-op for a job that is already running, failed or finished.
@shared_task(name="trainer.tasks.run_job", acks_late=True, ignore_result=True)
def run_job(job_id):
    """Run job `job_id` to its end (or until it is stopped)."""
    runner.run(job_id)


@shared_task(name="trainer.tasks.detect_crashed_jobs", ignore_result=True)
def detect_crashed_jobs():
    """Fail running jobs whose worker stopped beating; return how many."""
    failed = Job.fail_crashed(runner.heartbeat_limit_s())
    for job in failed:
        log.warning("job %s failed: %s", job.pk, job.error)
    return len(failed)

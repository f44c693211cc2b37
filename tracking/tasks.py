"""Celery entry points for outside runs: thin wrappers around tracking.kind and tracking.matching."""

import logging

from celery import shared_task
from django.conf import settings

from tracking.kind import fail_stale_runs
from tracking.matching import match_runs as match

log = logging.getLogger(__name__)


@shared_task(name="tracking.tasks.mark_stale_runs", ignore_result=True)
def mark_stale_runs():
    """Fail external jobs whose run logged nothing for YARDSTICK_RUN_STALE_S; return how many."""
    failed = fail_stale_runs(settings.YARDSTICK_RUN_STALE_S)
    for job in failed:
        log.warning("job %s: %s", job.pk, job.error)
    return len(failed)


@shared_task(name="tracking.tasks.match_runs", ignore_result=True)
def match_runs():
    """Turn the GPU holders of outside runs into stints of their jobs (tracking/matching.py); return the totals."""
    return match()

"""Celery entry points for sweeps: thin wrappers around sweeps.models."""

from celery import shared_task

from sweeps.models import advance_all
from yardstick.celery import shutting_down


@shared_task(name="sweeps.tasks.advance", ignore_result=True)
def advance():
    """Every sweep not yet ended takes its pass: budget, stopping by the dollar, new trials. None from a worker that is
    shutting down (yardstick.celery.shutting_down): the trials it started would go to workers going away."""
    return 0 if shutting_down() else advance_all()

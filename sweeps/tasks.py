"""Celery entry points for sweeps: thin wrappers around sweeps.models."""

from celery import shared_task

from sweeps.models import advance_all


@shared_task(name="sweeps.tasks.advance", ignore_result=True)
def advance():
    """Every sweep not yet ended takes its pass: budget, stopping by the dollar, new trials."""
    return advance_all()

"""Celery entry points for costs: thin wrappers around costs.attribution, costs.budget and costs.live."""

import logging

from celery import shared_task

from costs.attribution import attribute as attribute_minutes
from costs.budget import check_budgets
from costs.fold import fold as fold_days
from costs.live import publish_figures

log = logging.getLogger(__name__)


@shared_task(name="costs.tasks.attribute", ignore_result=True)
def attribute():
    """Attribute the closed minutes since the last run, stop jobs over budget, then share the new
    figures with the pages (costs.live); return a summary."""
    summary = attribute_minutes()
    summary["budget_stops"] = check_budgets()
    if summary["budget_stops"]:
        log.info("budget stops requested for jobs %s", summary["budget_stops"])
    publish_figures(summary)
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in summary.items()}


@shared_task(name="costs.tasks.fold", ignore_result=True)
def fold():
    """Fold the allocations past the horizon into their days, a minute of batches at a time (costs/fold.py)."""
    return fold_days()

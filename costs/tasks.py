"""Celery entry points for costs: thin wrappers around costs.attribution, costs.budget and costs.live."""

import logging

from celery import shared_task

from costs.attribution import attribute as attribute_minutes
from costs.budget import check_budgets
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

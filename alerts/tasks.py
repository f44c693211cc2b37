"""Celery entry points for alerts: thin wrappers around alerts.evaluate and alerts.delivery."""

from celery import shared_task

from alerts.delivery import send_due
from alerts.evaluate import evaluate as evaluate_rules


@shared_task(name="alerts.tasks.evaluate", ignore_result=True)
def evaluate():
    """Evaluate every rule, then send what that queued; return the evaluation's summary."""
    summary = evaluate_rules()
    summary["sent"] = send_due()
    return summary


@shared_task(name="alerts.tasks.deliver", ignore_result=True)
def deliver():
    """Send the deliveries due now (retries included)."""
    return send_due()

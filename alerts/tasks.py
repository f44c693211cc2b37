"""Celery entry points for alerts: thin wrappers around alerts.evaluate and alerts.delivery."""

from celery import shared_task

from alerts.delivery import send_due
from alerts.evaluate import evaluate as evaluate_rules
from alerts.stoploss import check as check_stop_losses


@shared_task(name="alerts.tasks.evaluate", ignore_result=True)
def evaluate():
    """Evaluate every rule, then send what that queued, then the jobs' stop-losses; return the summary."""
    summary = evaluate_rules()
    summary["sent"] = send_due()
    summary["stop_losses"] = check_stop_losses()
    return summary


@shared_task(name="alerts.tasks.deliver", ignore_result=True)
def deliver():
    """Send the deliveries due now (retries included)."""
    return send_due()

"""The periodic evaluation: every enabled rule against the data stored, firing and resolving alerts.

Run by the beat (alerts.tasks.evaluate); tests call `evaluate(now=...)` with an
explicit time. A rule whose condition cannot be read this time (a bug, a lost
connection) is logged and skipped: its firing alerts stay as they are rather
than resolving on missing data.
"""

import logging

from django.utils import timezone

from alerts.conditions import breaches
from alerts.models import Alert, AlertRule

log = logging.getLogger(__name__)


def evaluate(now=None):
    """Evaluate every rule; return {"fired": [alert ids], "resolved": [alert ids], "failed": [rule ids]}."""
    now = now or timezone.now()
    summary = {"fired": [], "resolved": [], "failed": []}
    for rule in AlertRule.objects.prefetch_related("channels"):
        firing = {a.subject: a for a in Alert.objects.firing().filter(rule=rule)}
        if not rule.enabled:
            found = {}
        else:
            try:
                found = breaches(rule, now)
            except Exception:
                log.exception("alert rule %s not evaluated", rule.pk)
                summary["failed"].append(rule.pk)
                continue
        for subject, (value, message) in sorted(found.items()):
            alert = firing.get(subject)
            if alert is None:
                alert = Alert.fire(rule, subject, value, message, now)
                if alert is not None:
                    summary["fired"].append(alert.pk)
            elif alert.value != value or alert.message != message:
                Alert.objects.filter(pk=alert.pk).update(value=value, message=message)
        for subject, alert in sorted(firing.items()):
            if subject not in found:
                why = "rule disabled" if not rule.enabled else "condition cleared"
                if alert.resolve(now, f"{subject}: {why}"):
                    summary["resolved"].append(alert.pk)
    return summary

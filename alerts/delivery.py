"""Sending notifications: due Deliveries to webhooks (generic JSON or Slack's {"text"}) and by email.

A delivery is claimed by row count (its next attempt pushed past LEASE_S), sent
outside any transaction with a short timeout, then marked delivered, or failed
with the error and its next attempt after BACKOFF_S doubling per attempt (capped
at BACKOFF_MAX_S); after MAX_ATTEMPTS it is given up and shows as failed. A
delivery whose alert was acknowledged or silenced before it went out is
cancelled instead.
"""

import json
import logging
import urllib.error
import urllib.request
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from alerts.models import TOPIC, Channel, Delivery
from yardstick.live import publish

log = logging.getLogger(__name__)

TIMEOUT_S = 5
BACKOFF_S = 30
BACKOFF_MAX_S = 30 * 60
MAX_ATTEMPTS = 8
# A claimed delivery is due again after this if its sender died mid-send.
LEASE_S = 120
ERROR_MAX = 500


def backoff_s(attempts):
    """Seconds before the next try after `attempts` failed ones: 30 s, 1, 2, 4 ... min, at most 30 min."""
    return min(BACKOFF_S * 2 ** (attempts - 1), BACKOFF_MAX_S)


def body(event, channel):
    """The JSON a webhook channel receives: Slack's {"text"}, or the generic event with its alert and rule."""
    if channel.kind == Channel.Kind.SLACK:
        return {"text": event.text_with_link()}
    alert = event.alert
    return {"event": event.kind, "at": event.at.isoformat(), "text": event.text(), "url": alert.url,
            "alert": alert.to_dict(),
            "rule": {"id": alert.rule_id, "name": alert.rule.name, "kind": alert.rule.kind,
                     "threshold": alert.rule.threshold, "duration": alert.rule.duration, "scope": alert.rule.scope}}


def send(event, channel):
    """Send one notification; raise on any failure (an HTTP status outside 2xx included)."""
    if channel.kind == Channel.Kind.EMAIL:
        alert = event.alert
        link = f"open: {alert.url}\n" if alert.url else ""
        send_mail(event.text(), f"{event.text()}\n\nsubject: {alert.subject}\nrule: {alert.rule.describe()}\n"
                                f"at: {event.at:%Y-%m-%d %H:%M:%S} UTC\n{link}", settings.DEFAULT_FROM_EMAIL,
                  channel.addresses)
        return
    request = urllib.request.Request(channel.target, data=json.dumps(body(event, channel)).encode(),
                                     headers={"Content-Type": "application/json", "User-Agent": "Yardstick"},
                                     method="POST")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
        resp.read(1024)


def _error_text(err):
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    return f"{type(err).__name__}: {err}"[:ERROR_MAX]


def send_due(now=None):
    """Send every delivery due at `now`; return {"delivered": n, "failed": n, "cancelled": n}."""
    now = now or timezone.now()
    counts = {"delivered": 0, "failed": 0, "cancelled": 0}
    due = list(Delivery.objects.filter(state=Delivery.State.PENDING, next_attempt_at__lte=now)
               .order_by("next_attempt_at", "id").values_list("pk", flat=True)[:200])
    for pk in due:
        claimed = Delivery.objects.filter(pk=pk, state=Delivery.State.PENDING, next_attempt_at__lte=now).update(
            next_attempt_at=now + timedelta(seconds=LEASE_S))
        if not claimed:
            continue  # another sender has it
        delivery = Delivery.objects.select_related("event__alert__rule", "channel").get(pk=pk)
        alert = delivery.event.alert
        if alert.is_quiet(now):
            why = f"acknowledged by {alert.acknowledged_by}" if alert.acknowledged_at else "silenced"
            Delivery.objects.filter(pk=pk).update(state=Delivery.State.CANCELLED, next_attempt_at=None,
                                                  last_error=f"not sent: the alert was {why}")
            counts["cancelled"] += 1
            continue
        attempts = delivery.attempts + 1
        try:
            send(delivery.event, delivery.channel)
        except Exception as err:  # noqa: BLE001 - any failure of a channel is recorded on the delivery and retried
            error = _error_text(err)
            gave_up = attempts >= MAX_ATTEMPTS
            Delivery.objects.filter(pk=pk).update(
                attempts=attempts, last_attempt_at=now, last_error=error,
                state=Delivery.State.FAILED if gave_up else Delivery.State.PENDING,
                next_attempt_at=None if gave_up else now + timedelta(seconds=backoff_s(attempts)))
            log.warning("delivery %s to %s failed (attempt %s): %s", pk, delivery.channel.name, attempts, error)
            counts["failed"] += 1
        else:
            Delivery.objects.filter(pk=pk).update(attempts=attempts, last_attempt_at=now, delivered_at=now,
                                                  state=Delivery.State.DELIVERED, next_attempt_at=None,
                                                  last_error="")
            counts["delivered"] += 1
        delivery.refresh_from_db()
        publish(TOPIC, "delivery", delivery.to_dict())
    return counts

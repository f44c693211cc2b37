"""Publish live events to browsers through the Channels layer.

Producers (the trainer, cost attribution, the telemetry broadcaster) call
`publish(topic, kind, data)`; the event goes out after the current transaction
commits, so a browser never hears of a row it cannot read yet. Pages subscribe
to topics such as "fleet" or "job.42" (see dashboard/consumers.py).
"""

import logging
import re

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

TOPIC = re.compile(r"^[a-z]+(\.[A-Za-z0-9_-]+)?$")


def group_name(topic):
    """Channels group names allow [a-zA-Z0-9_.-]; topics are "fleet", "job.42"..."""
    if not TOPIC.match(topic):
        raise ValueError(f"topic must look like 'fleet' or 'job.42', got {topic!r}")
    return f"live.{topic}"


def send_now(topic, kind, data):
    """Send at once. Return False (and log) when the channel layer is unreachable."""
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        async_to_sync(layer.group_send)(
            group_name(topic), {"type": "live.event", "topic": topic, "kind": kind, "data": data}
        )
    except Exception as err:  # noqa: BLE001 - a live view is a convenience: never fail the writer for it
        log.warning("live event %s/%s not sent: %s", topic, kind, err)
        return False
    return True


def publish(topic, kind, data):
    """Send `{topic, kind, data}` to subscribers of `topic` once the transaction commits."""
    group_name(topic)  # reject a bad topic now, in the caller's frame
    transaction.on_commit(lambda: send_now(topic, kind, data))

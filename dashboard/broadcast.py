"""New telemetry to the browsers that show it: a per-process poller of the latest-sample table.

The node agent writes only to PostgreSQL (no Redis on GPU nodes), so samples
reach browsers through the control plane. Each web process runs one poller
while at least one of its sockets shows the fleet or a node: every POLL_S it
reads `telemetry_latest` (one row per device, so the read costs the same
whatever the history) and sends the rows that changed straight to its own
subscribers. Sending locally rather than through the channel layer means two
web processes never deliver the same sample twice.

Events: topic "fleet", kind "samples": {"ts", "power_kw", "devices": [...]};
topic "node.<id>", kind "samples": {"samples": [...]} (the node's devices only).
"""

import asyncio
import logging

from channels.db import database_sync_to_async
from django.db import connection
from django.utils import timezone

log = logging.getLogger(__name__)

POLL_S = 0.5
FIELDS = ("util_pct", "sm_active_pct", "power_w", "temp_c", "mem_used_mib")

_READ = f"""
SELECT l.device_id, d.uuid, d.node_id, n.name, n.interval_s, d.index, l.ts, {', '.join('l.' + f for f in FIELDS)}
FROM telemetry_latest l JOIN collector_device d ON d.id = l.device_id JOIN collector_node n ON n.id = d.node_id
"""


def read_latest():
    """Every device's newest sample: [dict], one per device."""
    with connection.cursor() as cur:
        cur.execute(_READ)
        rows = cur.fetchall()
    names = ("device_id", "uuid", "node_id", "node", "interval_s", "index", "ts") + FIELDS
    return [dict(zip(names, row)) for row in rows]


def events(rows, seen, now=None):
    """(fleet event data or None, {node_id: node event data}) for rows newer than `seen` (updated in place)."""
    now = now or timezone.now()
    changed = []
    for row in rows:
        if seen.get(row["device_id"]) != row["ts"]:
            seen[row["device_id"]] = row["ts"]
            changed.append(row)
    if not changed:
        return None, {}
    fresh_w = sum(r["power_w"] or 0 for r in rows if (now - r["ts"]).total_seconds() <= 3 * r["interval_s"])
    sample = lambda r: {"uuid": r["uuid"], "node": r["node"], "index": r["index"], "ts": r["ts"].isoformat(),  # noqa: E731
                        **{f: r[f] for f in FIELDS}}
    fleet = {"ts": now.isoformat(), "power_kw": fresh_w / 1000, "devices": [sample(r) for r in changed]}
    nodes = {}
    for r in changed:
        nodes.setdefault(r["node_id"], []).append(sample(r))
    return fleet, {k: {"samples": v} for k, v in nodes.items()}


class Broadcaster:
    """One per process: subscribers are consumers with the telemetry topics they asked for."""

    def __init__(self, poll_s=POLL_S):
        self.poll_s = poll_s
        self.subscribers = {}
        self.seen = {}
        self.task = None

    def subscribe(self, consumer, topics):
        self.subscribers[consumer] = set(topics)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._loop())

    def unsubscribe(self, consumer):
        self.subscribers.pop(consumer, None)

    async def _loop(self):
        # Start from what is there now: the page was rendered with it.
        try:
            await self._tick(send=False)
            while self.subscribers:
                await asyncio.sleep(self.poll_s)
                await self._tick()
        except Exception:  # noqa: BLE001 - a broken poller must not take the socket down
            log.exception("telemetry broadcaster stopped")
        finally:
            self.task = None

    async def _tick(self, send=True):
        # database_sync_to_async closes the connection after the read (CONN_MAX_AGE = 0).
        rows = await database_sync_to_async(read_latest, thread_sensitive=False)()
        fleet, nodes = events(rows, self.seen)
        if not send or fleet is None:
            return
        for consumer, topics in list(self.subscribers.items()):
            try:
                if "fleet" in topics:
                    await consumer.send_json({"topic": "fleet", "kind": "samples", "data": fleet})
                for topic in topics:
                    if topic.startswith("node.") and int(topic[5:]) in nodes:
                        await consumer.send_json({"topic": topic, "kind": "samples", "data": nodes[int(topic[5:])]})
            except Exception as err:  # noqa: BLE001 - a closed socket: drop it
                log.info("dropping a live subscriber: %s", err)
                self.unsubscribe(consumer)


broadcaster = Broadcaster()

"""New telemetry to the browsers that show it: a per-process poller of the latest-sample table.

The node agent writes only to PostgreSQL (no Redis on GPU nodes), so samples
reach browsers through the control plane. Each web process runs one poller
while at least one of its sockets shows the fleet or a node: every POLL_S it
reads `telemetry_latest` (one row per device, so the read costs the same
whatever the history) and sends the rows that changed straight to its own
subscribers. Sending locally rather than through the channel layer means two
web processes never deliver the same sample twice.

Events: topic "fleet", kind "samples": {"ts", "power_kw", "devices": [...], "cards": {"busy",
"idle", "stale", "devices", "unhealthy", "burn_usd_per_h"}, "stale": [[node, index], ...]}, sent when
a sample is new or the cards changed (a device goes stale without any new row, or reports a critical
health event, or its last one turns a day old); topic "node.<id>", kind
"samples": {"samples": [...]} (the node's devices only). While the database cannot be read, every
subscriber gets kind "reading" {"ok": false} once (the reason goes to the log, not to browsers),
and {"ok": true} when reads work again; the poller keeps trying, backing off to RETRY_MAX_S, for
as long as anyone subscribes. The rows are the fleet page's (collector.store.latest_rows), each
device's state is Device.state_of and the cards are the page's (dashboard.readings.fleet_cards),
the unhealthy devices read with the rows (DeviceEvent.unhealthy, one query) and prices at most once a
minute.
"""

import asyncio
import json
import logging
import time

from channels.db import database_sync_to_async
from django.utils import timezone

from collector.models import Device, DeviceEvent
from collector.store import latest_rows
from costs.prices import PriceBook
from dashboard.readings import fleet_cards

log = logging.getLogger(__name__)

POLL_S = 0.5
RETRY_MAX_S = 5.0  # the longest wait between reads while the database is failing
READ_TIMEOUT_S = 10.0  # a read with no answer by then counts as failed (a hung server)
PRICES_EVERY_S = 60.0
SEND_FAILED = 4410  # the close code of a socket an event could not be sent to (e.g. over the size limit)
FIELDS = ("util_pct", "sm_active_pct", "power_w", "temp_c", "mem_used_mib")
# A node page also draws what newer GPUs report (dashboard.figures.NODE_METRICS); the fleet page does not.
NODE_FIELDS = FIELDS + ("tensor_active_pct", "sm_occupancy_pct", "module_power_w", "nvlink_tx_bytes_s",
                        "nvlink_rx_bytes_s", "clock_event_reasons", "power_limit_w")
CARDS = ("busy", "idle", "stale", "devices")  # of fleet_cards, beside the burn rate and unhealthy (power_kw is apart)


def read_latest():
    """Every device and its newest sample (collector.store.latest_rows, without the nodes that have none)."""
    return [r for r in latest_rows() if r["device_id"] is not None]


def events(rows, seen, now=None, book=None, shown=None, shown_stale=None, unhealthy=None):
    """(fleet event data or None, {node_id: node event data}) for rows newer than `seen` (updated in place).

    The fleet event also goes out with no new row when its cards differ from `shown` (the cards last
    sent) or, given `shown_stale` (the "stale" list last sent), when other devices are stale now. Its
    "stale" lists every stale device as [node, index], for the heatmap to blank their cells. Given
    `unhealthy` (DeviceEvent.unhealthy: {device id: event}), its cards count the rows' devices in it.
    """
    now = now or timezone.now()
    changed = []
    for row in rows:
        if row["latest"] is not None and seen.get(row["device_id"]) != row["latest"]["ts"]:
            seen[row["device_id"]] = row["latest"]["ts"]
            changed.append(row)
    states = [Device.state_of(r["latest"], r["interval_s"], now) for r in rows]
    page_cards = fleet_cards(rows, states, now, book, unhealthy)
    now_cards = {k: page_cards[k] for k in CARDS}
    if unhealthy is not None:
        now_cards["unhealthy"] = page_cards["unhealthy"]
    if book is not None:
        now_cards["burn_usd_per_h"] = str(page_cards["burn_usd_per_h"])
    stale = sorted([r["node"], r["index"]] for r, state in zip(rows, states) if state == "stale")
    if not changed and now_cards == shown and (shown_stale is None or stale == shown_stale):
        return None, {}
    def sample(r, fields=FIELDS):
        out = {"uuid": r["uuid"], "node": r["node"], "index": r["index"], "ts": r["latest"]["ts"].isoformat(),
               **{f: r["latest"][f] for f in fields}}
        return out

    fleet = {"ts": now.isoformat(), "power_kw": page_cards["power_kw"], "devices": [sample(r) for r in changed],
             "cards": now_cards, "stale": stale}
    nodes = {}
    for r in changed:
        nodes.setdefault(r["node_id"], []).append(sample(r, NODE_FIELDS))
    return fleet, {k: {"samples": v} for k, v in nodes.items()}


class Broadcaster:
    """One per process: subscribers are consumers with the telemetry topics they asked for."""

    def __init__(self, poll_s=POLL_S):
        self.poll_s = poll_s
        self.subscribers = {}
        self.seen = {}
        self.shown = None  # the cards last sent
        self.shown_stale = None  # the stale devices last sent
        self.book = None
        self.book_read_at = 0.0
        self.task = None
        self.failing = None  # why the last read failed, while reads fail
        self.reading = None  # the read in flight (one at a time, even when one hangs)

    def subscribe(self, consumer, topics):
        self.subscribers[consumer] = set(topics)
        if "fleet" in topics:
            self.shown = self.shown_stale = None  # they may have moved since its page was rendered: send again
        loop = asyncio.get_running_loop()
        if self.failing is not None:  # a page opened during an outage says so at once
            loop.create_task(self._tell(consumer, {"ok": False}))
        if self.task is None or self.task.done():
            self.task = loop.create_task(self._loop())

    def unsubscribe(self, consumer):
        self.subscribers.pop(consumer, None)

    async def _loop(self):
        # Start from what is there now: the page was rendered with it.
        send, delay = False, self.poll_s
        try:
            while True:
                try:
                    await self._tick(send=send)
                except Exception as err:  # noqa: BLE001 - the database away: say so, keep trying
                    delay = min(RETRY_MAX_S, delay * 2)
                    if self.failing is None:
                        log.warning("live telemetry: cannot read the database (%s); retrying", _first_line(err))
                        self.failing = _first_line(err)
                        await self._tell_all({"ok": False})
                else:
                    delay = self.poll_s
                    if self.failing is not None:
                        log.info("live telemetry: reading the database again")
                        self.failing = None
                        await self._tell_all({"ok": True})
                send = True
                if not self.subscribers:
                    return
                await asyncio.sleep(delay)
                if not self.subscribers:
                    return
        finally:
            self.task = None
            self.reading = None  # a read left in flight belongs to this loop; the next loop starts its own

    async def _tell_all(self, data):
        for consumer in list(self.subscribers):
            await self._tell(consumer, data)

    async def _tell(self, consumer, data):
        topics = sorted(self.subscribers.get(consumer, ()))
        if topics:
            await self._send(consumer, json.dumps({"topic": topics[0], "kind": "reading", "data": data}))

    async def _send(self, consumer, text):
        """Send one encoded event. A send that fails (a closed socket, a frame over the server's size
        limit) drops the subscriber and closes its socket: its page then says it is not live and
        reconnects, rather than showing "live" while nothing more arrives."""
        try:
            await consumer.send(text_data=text)
        except Exception as err:  # noqa: BLE001
            log.warning("dropping a live subscriber: %s", _first_line(err))
            self.unsubscribe(consumer)
            try:
                await consumer.close(code=SEND_FAILED)
            except Exception:  # noqa: BLE001 - already closed
                pass
            return False
        return True

    def _read(self):
        """The rows and the unhealthy devices (DeviceEvent.unhealthy), and the price book when it is older than
        PRICES_EVERY_S (sync: runs in a thread)."""
        if self.book is None or time.monotonic() - self.book_read_at > PRICES_EVERY_S:
            self.book, self.book_read_at = PriceBook(), time.monotonic()
        return read_latest(), DeviceEvent.unhealthy()

    async def _tick(self, send=True):
        # database_sync_to_async closes the connection after the read (CONN_MAX_AGE = 0).
        if self.reading is None:
            self.reading = asyncio.ensure_future(database_sync_to_async(self._read, thread_sensitive=False)())
        try:
            rows, unhealthy = await asyncio.wait_for(asyncio.shield(self.reading), READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer in {READ_TIMEOUT_S:g} s") from None
        except Exception:
            self.reading = None
            raise
        self.reading = None
        fleet, nodes = events(rows, self.seen, book=self.book, shown=self.shown, shown_stale=self.shown_stale or [],
                              unhealthy=unhealthy)
        if not send or fleet is None:
            return
        self.shown, self.shown_stale = fleet["cards"], fleet["stale"]
        # Each event is encoded once, whatever the number of viewers who get it.
        encoded = {}

        def text(topic):
            if topic not in encoded:
                data = fleet if topic == "fleet" else nodes[int(topic[5:])]
                encoded[topic] = json.dumps({"topic": topic, "kind": "samples", "data": data})
            return encoded[topic]

        for consumer, topics in list(self.subscribers.items()):
            for topic in sorted(topics):
                if topic == "fleet" or (topic.startswith("node.") and int(topic[5:]) in nodes):
                    if not await self._send(consumer, text(topic)):
                        break


def _first_line(err):
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


broadcaster = Broadcaster()

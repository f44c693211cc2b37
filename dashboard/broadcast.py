"""New telemetry to the browsers that show it.

The node agent writes only to PostgreSQL (no Redis on GPU nodes), so samples reach browsers through the
control plane, in two ways:

**The fleet** (topic "fleet"): one *publisher* for the whole control plane reads the fleet when new samples
are committed (it LISTENs for the NOTIFY every agent's write sends, collector.agent.schema.WRITES_CHANNEL; at
most every BUSY_GAP_S, and every QUIET_POLL_S without one: staleness is a matter of time; every POLL_S while
it cannot listen) (dashboard.fleetstate: one narrow query of `telemetry_latest`, numpy for the rest), computes the cards
once, encodes the frame once, and publishes it on the control plane's Redis; every web process *relays*
what it hears to its own fleet sockets and does nothing else for them, so more web processes serve more
viewers. The publisher is elected by a lock in Redis (PUBLISHER_KEY, PUBLISHER_TTL_MS, renewed each
tick) among the web processes that have a fleet viewer; when it goes, another takes the lock within a
lock's life and starts with a whole frame. What goes out (docs/architecture.md, "Live fleet frames"):

- the layout, a JSON text event {"topic": "fleet", "kind": "layout", "data": ...}: the devices in order
  with their nodes, labels and models, at subscribe and whenever the fleet changes;
- a binary frame per tick: "S" (every device) after a layout and from a new publisher, else "D" (only
  the devices that changed: a new sample, another state, utilization or power), with the cards;
- {"topic": "fleet", "kind": "reading", "data": {"ok": false}} while the database cannot be read (the
  reason goes to the log), {"ok": true} when it can again.

A new fleet socket gets the newest layout and a whole frame from Redis (LAYOUT_KEY, SNAPSHOT_KEY), then
every frame published after that one; a socket whose page says it has that layout (`layout=<version>` in the
socket's query: the page embeds it) gets the whole frame alone.

**A node** (topic "node.<id>"): each web process reads, every POLL_S while one of its sockets shows a
node, the newest samples of those nodes' devices only, with every field the node page draws, and sends
kind "samples" {"samples": [...]} for the ones that changed to its own subscribers.

Reads run in a thread (database_sync_to_async); a read with no answer in READ_TIMEOUT_S counts as failed;
failed reads back off to RETRY_MAX_S.
"""

import asyncio
import json
import logging
import os
import struct
import time
import uuid

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from collector.models import DeviceEvent
from collector.store import latest_rows
from costs.prices import PriceBook
from dashboard import fleetstate

log = logging.getLogger(__name__)

POLL_S = 0.5  # the time between two reads of a node, and of the fleet while the publisher cannot hear the writes
# While it hears them: the shortest time between two reads of the fleet (agents' commits come in clusters: a
# longer gap would hold most of a cluster's samples back as a poll does), and the longest (staleness is a
# matter of time).
BUSY_GAP_S = 0.25
QUIET_POLL_S = 1.0
RETRY_MAX_S = 5.0  # the longest wait between reads while the database is failing
READ_TIMEOUT_S = 10.0  # a read with no answer by then counts as failed (a hung server)
PRICES_EVERY_S = 60.0
LAYOUT_EVERY_S = 5.0  # the publisher reads the layout again this often (and at once on an unknown device)
SEND_FAILED = 4410  # the close code of a socket an event could not be sent to (e.g. over the size limit)
NODE_FIELDS = ("util_pct", "sm_active_pct", "power_w", "temp_c", "mem_used_mib", "tensor_active_pct",
               "sm_occupancy_pct", "module_power_w", "nvlink_tx_bytes_s", "nvlink_rx_bytes_s", "clock_event_reasons",
               "power_limit_w")  # what a node page draws (dashboard.figures.NODE_METRICS)

CHANNEL = "yardstick:live:fleet"  # Redis pub/sub: b"T" + a text event, or b"B" + a binary frame
LAYOUT_KEY = "yardstick:live:fleet:layout"
SNAPSHOT_KEY = "yardstick:live:fleet:snapshot"
READING_KEY = "yardstick:live:fleet:reading"  # why the publisher cannot read the database, while it cannot
SEQ_KEY = "yardstick:live:fleet:seq"
PUBLISHER_KEY = "yardstick:live:fleet:publisher"
PUBLISHER_TTL_MS = 3000
KEYS_TTL_S = 3600  # the layout and snapshot outlive no publisher by more than this
WAIT = "wait"


def _first_line(err):
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def frame_header(message):
    """The header of a binary fleet frame (dashboard.fleetstate.encode): seq, layout, cards ..."""
    (size,) = struct.unpack_from("<I", message, 4)
    return json.loads(message[8:8 + size])


_LAYOUT_PREFIX = '{"topic":"fleet","kind":"layout","data":{"version":"'  # dashboard.fleetstate.layout_event's


def layout_version(text):
    """The version of a layout event's text (its first field), or None for another event."""
    if not text.startswith(_LAYOUT_PREFIX):
        return None
    return text[len(_LAYOUT_PREFIX):text.index('"', len(_LAYOUT_PREFIX))]


def frame_seq(message):
    """The sequence number in a binary fleet frame's header."""
    return frame_header(message)["seq"]


def _redis():
    import redis.asyncio as aioredis  # here: only a web process with live viewers needs it

    return aioredis.from_url(settings.REDIS_URL, socket_timeout=30, health_check_interval=15)


# -- the publisher -------------------------------------------------------------------------------


class FleetReader:
    """What the publisher knows between ticks: the layout, the prices, the frame last published."""

    def __init__(self):
        self.layout = None
        self.layout_read_at = 0.0
        self.book = None
        self.book_read_at = 0.0
        self.prices = None
        self.last = None  # the Frame last published, of self.layout

    def tick(self, now=None):
        """(layout event or None, frame) for now: the layout when it is new or changed (sync: runs in a thread;
        database_sync_to_async closes the connection after it, CONN_MAX_AGE = 0)."""
        now = now or timezone.now()
        fresh_layout = None
        if self.layout is None or time.monotonic() - self.layout_read_at > LAYOUT_EVERY_S:
            fresh_layout = self._read_layout()
        values = fleetstate.read_values(self.layout)
        if values.unknown and fresh_layout is None:  # a device the layout has not: the fleet changed
            fresh_layout = self._read_layout()
            values = fleetstate.read_values(self.layout)
        if self.book is None or time.monotonic() - self.book_read_at > PRICES_EVERY_S:
            self.book, self.book_read_at, self.prices = PriceBook(), time.monotonic(), None
        if self.prices is None:
            self.prices = fleetstate.Prices(self.layout, self.book, now.date())
        frame = fleetstate.compute(self.layout, values, fleetstate.epoch_us(now), DeviceEvent.unhealthy(now=now),
                                   self.prices)
        return fresh_layout, frame

    def _read_layout(self):
        layout = fleetstate.read_layout()
        self.layout_read_at = time.monotonic()
        if self.layout is not None and layout.version == self.layout.version:
            return None
        self.layout, self.prices, self.last = layout, None, None
        return layout


class Publisher:
    """The publishing half of a web process: while it holds PUBLISHER_KEY, reads, encodes and publishes."""

    def __init__(self, redis, poll_s):
        self.redis = redis
        self.poll_s = poll_s
        self.token = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.reader = FleetReader()
        self.holding = False
        self.reading = None  # the read in flight (one at a time, even when one hangs)
        self.failing = None
        self.hearing = None  # the task that LISTENs for new samples, while this process publishes
        self.hear_again_at = 0.0
        self.listening = False  # LISTENing now: the writes wake the publisher
        self.written = False  # samples were committed since the last read began

    async def elect(self):
        """Hold the lock (take it, or renew it when ours); whether this process publishes."""
        if await self.redis.set(PUBLISHER_KEY, self.token, nx=True, px=PUBLISHER_TTL_MS):
            won = True
        else:
            won = (await self.redis.get(PUBLISHER_KEY)) == self.token.encode()
            if won:
                await self.redis.pexpire(PUBLISHER_KEY, PUBLISHER_TTL_MS)
        if won and not self.holding:
            log.info("live fleet: this process publishes (%s)", self.token)
            self.reader.last = None  # a new publisher starts with a whole frame
        self.holding = won
        return won

    async def release(self):
        self.stop_hearing()
        if self.holding and (await self.redis.get(PUBLISHER_KEY)) == self.token.encode():
            await self.redis.delete(PUBLISHER_KEY)
        self.holding = False

    def hear_writes(self, stir):
        """While this process publishes, LISTEN for the agents' writes on a connection of its own; each sets
        `written` and `stir` (an asyncio.Event the loop waits on). A lost connection is tried again after
        RETRY_MAX_S; meanwhile the publisher reads every POLL_S."""
        if not self.holding:
            self.stop_hearing()
        elif (self.hearing is None or self.hearing.done()) and time.monotonic() >= self.hear_again_at:
            self.hearing = asyncio.ensure_future(self._hear(stir))

    def stop_hearing(self):
        if self.hearing is not None:
            self.hearing.cancel()
            self.hearing = None
        self.listening = False

    async def _hear(self, stir):
        import psycopg  # noqa: PLC0415 - only the publishing process listens
        from django.db import connections  # here, as psycopg: only the publishing process listens

        from collector.agent.schema import WRITES_CHANNEL  # here, as psycopg
        from collector.management.commands.collect import settings_dsn  # here, as psycopg

        try:
            conn = await psycopg.AsyncConnection.connect(settings_dsn(connections["default"].settings_dict), autocommit=True,
                                                         connect_timeout=int(READ_TIMEOUT_S))
            async with conn:
                await conn.execute(f"LISTEN {WRITES_CHANNEL}")
                self.listening = True
                self.written = True  # what was written before we listened
                stir.set()
                async for _ in conn.notifies():
                    self.written = True
                    stir.set()
        except Exception as err:  # noqa: BLE001 - the database away: poll meanwhile, listen again later
            log.warning("live fleet: cannot listen for new samples (%s); polling", _first_line(err))
        finally:
            self.listening = False
            self.hear_again_at = time.monotonic() + RETRY_MAX_S

    def next_read(self, last_read):
        """When the next read is due, by the monotonic clock, after one that began at `last_read`."""
        if not self.listening:
            return last_read + self.poll_s
        return last_read + (min(self.poll_s, BUSY_GAP_S) if self.written else QUIET_POLL_S)

    async def publish_tick(self):
        """One read and what it publishes (while reads fail, `failing` says why)."""
        if self.reading is None:
            self.written = False
            self.reading = asyncio.ensure_future(database_sync_to_async(self.reader.tick, thread_sensitive=False)())
        try:
            layout, frame = await asyncio.wait_for(asyncio.shield(self.reading), READ_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - the database away: say so, keep trying
            if not isinstance(err, asyncio.TimeoutError):
                self.reading = None
            why = f"no answer in {READ_TIMEOUT_S:g} s" if isinstance(err, asyncio.TimeoutError) else _first_line(err)
            if self.failing is None:
                log.warning("live telemetry: cannot read the database (%s); retrying", why)
                self.failing = why
                await self.redis.set(READING_KEY, why, ex=KEYS_TTL_S)
                await self._text({"topic": "fleet", "kind": "reading", "data": {"ok": False}})
            return
        self.reading = None
        if self.failing is not None:
            log.info("live telemetry: reading the database again")
            self.failing = None
            await self.redis.delete(READING_KEY)
            await self._text({"topic": "fleet", "kind": "reading", "data": {"ok": True}})
        reader = self.reader
        whole_frame = layout is not None or reader.last is None
        if not whole_frame:
            mask = fleetstate.changed(frame, reader.last)
            why = frame.unhealthy != reader.last.unhealthy
            if not mask.any() and not why and frame.cards == reader.last.cards:
                return  # nothing to tell
        seq = await self.redis.incr(SEQ_KEY)
        head = fleetstate.frame_header(frame, reader.layout, seq)
        whole = fleetstate.encode(frame, head)
        pipe = self.redis.pipeline(transaction=False)
        if whole_frame:
            event = fleetstate.layout_event(reader.layout)
            pipe.set(LAYOUT_KEY, event, ex=KEYS_TTL_S)
            pipe.publish(CHANNEL, b"T" + event.encode())
            sent = whole
        else:
            sent = fleetstate.encode(frame, head, mask, why=why)
        pipe.set(SNAPSHOT_KEY, whole, ex=KEYS_TTL_S)
        pipe.publish(CHANNEL, b"B" + sent)
        await pipe.execute()
        reader.last = frame

    async def _text(self, event):
        await self.redis.publish(CHANNEL, b"T" + json.dumps(event).encode())


# -- the broadcaster: relay, candidate publisher, node poller --------------------------------------


class Broadcaster:
    """One per process: subscribers are consumers with the telemetry topics they asked for."""

    def __init__(self, poll_s=POLL_S):
        self.poll_s = poll_s
        self.subscribers = {}  # consumer -> its telemetry topics
        # fleet consumer -> the seq of the last frame it has; None until welcomed, WAIT while nothing was published
        self.fleet = {}
        self.waiting = {}  # fleet consumer -> messages heard while its welcome is under way
        self.has_layout = {}  # fleet consumer -> the layout version its page has (None: send it the layout)
        self.stir = None  # an asyncio.Event: the fleet loop has something to do (a new socket, new samples)
        self.relay_task = None
        self.node_task = None
        self.seen = {}  # device id -> the sample time last sent to node subscribers
        self.node_failing = None
        self.node_reading = None
        self.published = 0  # frames this process published (tests and bench read it)
        self._welcoming = set()

    def subscribe(self, consumer, topics, layout=None):
        """Follow `topics` for `consumer`; `layout`: the version of the fleet layout its page already has (the
        welcome then sends the whole frame alone when that is still the fleet's)."""
        self.subscribers[consumer] = set(topics)
        loop = asyncio.get_running_loop()
        if "fleet" in topics:
            self.fleet[consumer] = None
            self.waiting[consumer] = []
            self.has_layout[consumer] = layout
            if self.stir is not None:
                self.stir.set()  # welcome it now
            if self.relay_task is None or self.relay_task.done():
                self.relay_task = loop.create_task(self._relay())
        if any(t.startswith("node.") for t in topics) and (self.node_task is None or self.node_task.done()):
            self.node_task = loop.create_task(self._nodes())

    def unsubscribe(self, consumer):
        self.subscribers.pop(consumer, None)
        self.fleet.pop(consumer, None)
        self.waiting.pop(consumer, None)
        self.has_layout.pop(consumer, None)

    async def _send(self, consumer, text=None, data=None):
        """Send one encoded event. A send that fails (a closed socket, a frame over the server's size
        limit) drops the subscriber and closes its socket: its page then says it is not live and
        reconnects, rather than showing "live" while nothing more arrives."""
        try:
            if data is not None:
                await consumer.send(bytes_data=data)
            else:
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

    # -- the fleet: relay what the publisher publishes; stand for publisher ------------------------

    async def _relay(self):
        """While this process has fleet sockets: hear the channel, welcome new sockets, pass frames on, and
        take part in the publisher's election."""
        delay = self.poll_s
        while self.fleet:
            redis = _redis()
            pubsub = redis.pubsub()
            publisher = Publisher(redis, self.poll_s)
            try:
                await pubsub.subscribe(CHANNEL)
                await self._listen(redis, pubsub, publisher)
                delay = self.poll_s
            except Exception as err:  # noqa: BLE001 - Redis away: the channel layer says so too; try again
                log.warning("live fleet: Redis not answering (%s); retrying", _first_line(err))
                delay = min(RETRY_MAX_S, delay * 2)
                await asyncio.sleep(delay)
            finally:
                try:
                    await publisher.release()
                    await pubsub.aclose()
                    await redis.aclose()
                except Exception:  # noqa: BLE001 - gone already
                    pass
        self.relay_task = None

    async def _listen(self, redis, pubsub, publisher):
        """The fleet loop: welcome new sockets; stand for publisher and, while publishing, read and publish when
        samples were written (or a quiet interval passed). What the channel carries is passed on by a task of
        its own (_hear_channel) as it arrives."""
        self.stir = stir = asyncio.Event()
        hearing = asyncio.ensure_future(self._hear_channel(pubsub))
        hearing.add_done_callback(lambda _: stir.set())
        began = -RETRY_MAX_S  # when the last read (or attempt to be elected) began, by the monotonic clock
        try:
            while self.fleet:
                stir.clear()
                if hearing.done():
                    hearing.result()  # Redis went away: raises, and _relay connects again
                    raise ConnectionError("the channel's connection ended")
                for consumer in [c for c, seq in self.fleet.items() if seq is None and c not in self._welcoming]:
                    self._welcoming.add(consumer)
                    asyncio.get_running_loop().create_task(self._welcome(redis, consumer))
                if publisher.failing is not None:
                    due = began + RETRY_MAX_S
                elif publisher.holding:
                    due = publisher.next_read(began)
                else:
                    due = began + self.poll_s
                now = time.monotonic()
                if now < due:
                    try:
                        await asyncio.wait_for(stir.wait(), due - now)
                    except asyncio.TimeoutError:
                        pass
                    continue
                began = now
                if await publisher.elect():
                    publisher.hear_writes(stir)
                    await publisher.publish_tick()
                    self.published += 1
                else:
                    publisher.stop_hearing()
        finally:
            hearing.cancel()
            self.stir = None
        await publisher.release()

    async def _hear_channel(self, pubsub):
        async for message in pubsub.listen():
            if message["type"] == "message":
                await self._pass_on(message["data"])

    async def _welcome(self, redis, consumer):
        """A new fleet socket: the newest layout (unless its page has that one: at 100,000 devices it is 2 MB)
        and whole frame, then what was heard meanwhile."""
        try:
            layout, whole, failing, publisher = await redis.mget(LAYOUT_KEY, SNAPSHOT_KEY, READING_KEY, PUBLISHER_KEY)
            if consumer not in self.fleet:
                return
            if failing is not None and publisher is not None:
                await self._send(consumer, text=json.dumps({"topic": "fleet", "kind": "reading", "data": {"ok": False}}))
            # Nothing published, or left by a publisher gone: the next publisher's first layout welcomes it.
            if layout is None or whole is None or publisher is None:
                if self.fleet.get(consumer, WAIT) is None:
                    self.fleet[consumer] = WAIT
                return
            header = frame_header(whole)
            if not (await self._send_text(consumer, layout.decode()) and await self._send(consumer, data=whole)):
                return
            seq = header["seq"]
            while self.waiting.get(consumer):
                kind, body, their_seq = self.waiting[consumer].pop(0)
                if kind == "T":
                    await self._send_text(consumer, body)
                elif their_seq > seq:
                    await self._send(consumer, data=body)
                    seq = their_seq
            if consumer in self.fleet:
                self.fleet[consumer] = seq
                self.waiting[consumer] = []
        except Exception as err:  # noqa: BLE001 - Redis away: tried again on the next pass
            log.warning("live fleet: could not welcome a socket (%s)", _first_line(err))
        finally:
            self._welcoming.discard(consumer)

    async def _pass_on(self, message):
        kind, body = message[:1].decode(), message[1:]
        seq = frame_seq(body) if kind == "B" else None
        text = body.decode() if kind == "T" else None
        for consumer, have in list(self.fleet.items()):
            if have is None:  # its welcome is under way: it sends these after the whole frame
                if consumer in self.waiting:
                    self.waiting[consumer].append((kind, text if kind == "T" else body, seq))
                continue
            if have is WAIT:  # it heard nothing yet: a layout and the whole frame after it welcome it
                if kind == "T" and await self._send_text(consumer, text) and layout_version(text) is not None:
                    self.fleet[consumer] = 0
                continue
            if kind == "T":
                await self._send_text(consumer, text)
            elif seq > have:
                if await self._send(consumer, data=body):
                    self.fleet[consumer] = seq

    async def _send_text(self, consumer, text):
        """Send a text event; a layout only to a socket whose page has not that one (its page embedded it, or
        it was sent it). True when it got there or was not needed."""
        version = layout_version(text)
        if version is not None:
            if version == self.has_layout.get(consumer):
                return True
            if not await self._send(consumer, text=text):
                return False
            self.has_layout[consumer] = version
            return True
        return await self._send(consumer, text=text)

    # -- nodes ------------------------------------------------------------------------------------

    def _node_ids(self):
        return sorted({int(t[5:]) for topics in self.subscribers.values() for t in topics if t.startswith("node.")})

    async def _nodes(self):
        send, delay = False, self.poll_s
        try:
            while self._node_ids():
                try:
                    await self._node_tick(send)
                except Exception as err:  # noqa: BLE001 - the database away: say so, keep trying
                    delay = min(RETRY_MAX_S, delay * 2)
                    if self.node_failing is None:
                        log.warning("live telemetry: cannot read the database (%s); retrying", _first_line(err))
                        self.node_failing = _first_line(err)
                        await self._tell_nodes({"ok": False})
                else:
                    delay = self.poll_s
                    if self.node_failing is not None:
                        self.node_failing = None
                        await self._tell_nodes({"ok": True})
                send = True
                await asyncio.sleep(delay)
        finally:
            self.node_task = None
            self.node_reading = None

    async def _tell_nodes(self, data):
        for consumer, topics in list(self.subscribers.items()):
            nodes = sorted(t for t in topics if t.startswith("node."))
            if nodes:
                await self._send(consumer, text=json.dumps({"topic": nodes[0], "kind": "reading", "data": data}))

    async def _node_tick(self, send):
        ids = self._node_ids()
        if self.node_reading is None:
            self.node_reading = asyncio.ensure_future(
                database_sync_to_async(latest_rows, thread_sensitive=False)(node_ids=ids))
        try:
            rows = await asyncio.wait_for(asyncio.shield(self.node_reading), READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer in {READ_TIMEOUT_S:g} s") from None
        except Exception:
            self.node_reading = None
            raise
        self.node_reading = None
        events = node_events(rows, self.seen)
        if not send:
            return
        encoded = {k: json.dumps({"topic": f"node.{k}", "kind": "samples", "data": v}) for k, v in events.items()}
        for consumer, topics in list(self.subscribers.items()):
            for topic in sorted(topics):
                if topic.startswith("node.") and int(topic[5:]) in encoded:
                    if not await self._send(consumer, text=encoded[int(topic[5:])]):
                        break


def node_events(rows, seen):
    """{node id: {"samples": [...]}} of the rows (collector.store.latest_rows) whose newest sample is newer than
    `seen` ({device id: sample time}, updated in place)."""
    out = {}
    for r in rows:
        if r["device_id"] is None or r["latest"] is None or seen.get(r["device_id"]) == r["latest"]["ts"]:
            continue
        seen[r["device_id"]] = r["latest"]["ts"]
        out.setdefault(r["node_id"], []).append({
            "uuid": r["uuid"], "node": r["node"], "index": r["index"], "ts": r["latest"]["ts"].isoformat(),
            **{f: r["latest"][f] for f in NODE_FIELDS}})
    return {k: {"samples": v} for k, v in out.items()}


broadcaster = Broadcaster()

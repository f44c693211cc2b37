"""The agent loop: read the source every tick, write the batch, spool when the database is away.

Two threads. The sampling thread reads the source every interval and never
waits on the database: it hands each batch to the delivery thread, or, when
that thread is still busy (a slow or hung database) or the spool already
holds batches, appends it to the spool on disk. The delivery thread writes
batches (one transaction each) and replays the spool, oldest first, for up
to one interval at a time. A SIGKILL loses at most the tick being read and
the one batch being written.

Ticks keep a phase of their own within the interval: the first comes at
once, the rest where the wall clock's time modulo the interval equals the
agent's offset, a hash of its phase key (the node's name) spread over the
interval (Prometheus spreads its scrapes the same way). A fleet's agents,
even ones started together by one rollout, write at different moments of
each interval instead of all at once; a restarted agent keeps its moment.

Every database call is bounded: connecting by `connect_timeout_s`; a write
by `db_timeout_s`, enforced on the server (statement_timeout) and, for a
server that answers nothing at all (stopped, partitioned away), by a
watchdog that shuts the connection's socket down, which ends the blocked
call with an error; the batch goes to the spool and the agent reconnects.
TCP keepalives notice a peer that went away while the connection was idle.
"""

import hashlib
import logging
import math
import os
import socket
import threading
import time
from datetime import datetime, timezone

import psycopg

from .batch import Batch
from .spool import Unwritable
from .writer import Writer

log = logging.getLogger("collector.agent")

# Seconds between reconnect attempts while the database is unreachable (doubling up to the max).
RECONNECT_MIN_S = 1.0
RECONNECT_MAX_S = 30.0
# The longest one write (or one replayed batch) may take before it is abandoned and spooled.
DB_TIMEOUT_S = 15.0
# How often the watchdog looks at the write in progress.
WATCH_EVERY_S = 0.2
# How long the end of a run waits for a scrape in progress (its pages' fetches are bounded by their timeout).
FETCH_JOIN_S = 30.0
# TCP keepalive: probe an idle connection after 10 s, every 5 s, give up after 3 misses.
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def tick_offset(key, interval_s):
    """Seconds into each interval (by the wall clock) at which an agent with phase key `key` ticks:
    a hash of the key spread evenly over [0, interval_s)."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * interval_s


def first_phased_tick(offset_s, interval_s, wall, mono):
    """The monotonic time of the first tick on the phase `offset_s`, at least a tenth of an interval after
    `mono` (the same instant as `wall` on the wall clock): the tick before it just ran."""
    wait = (offset_s - wall) % interval_s
    if wait < interval_s / 10:
        wait += interval_s
    return mono + wait


class Agent:
    def __init__(self, source, dsn, spool, interval_s=1.0, labels=None, connect_timeout_s=3, db_timeout_s=DB_TIMEOUT_S,
                 phase_key=None, serving=None):
        self.source = source
        self.serving = serving  # a serving.Scraper: the node's serving deployments, read on a thread of their own
        self.last_holders = ()  # ((device uuid, Holder), ...) of the last tick: who held each GPU
        self.dsn = dsn
        self.spool = spool
        self.interval_s = interval_s
        # None: tick every interval from the first tick on (a benchmark, a test)
        self.offset_s = None if phase_key is None else tick_offset(phase_key, interval_s)
        self.labels = dict(labels or {})
        self.addresses = list(getattr(source, "addresses", ()))  # the node's, where the source reads this machine
        self.connect_timeout_s = connect_timeout_s
        self.db_timeout_s = db_timeout_s
        self.conn = None
        self.writer = None
        self.ticks = 0
        self.samples_written = 0
        self.writes_abandoned = 0  # writes the watchdog cut off after db_timeout_s
        self._retry_at = 0.0
        self._retry_s = RECONNECT_MIN_S
        self._down = False
        self._handoff = threading.Condition()  # guards _pending and _busy
        self._pending = None  # the batch handed to the delivery thread
        self._busy = False  # the delivery thread is working on a batch or the spool
        self._deadline = None  # monotonic time the database call in progress must end by
        self._conn_lock = threading.Lock()  # the watchdog never touches a connection being replaced
        self._threaded = False

    def run(self, stop=None, ticks=None):
        """Tick every interval until `stop` (a threading.Event) is set or `ticks` ticks ran."""
        stop = stop or threading.Event()
        done = threading.Event()  # sampling has ended
        delivered = threading.Event()  # and the delivery thread has written what it could
        delivery = threading.Thread(target=self._deliver_loop, args=(done,), name="agent-delivery", daemon=True)
        watchdog = threading.Thread(target=self._watch, args=(delivered,), name="agent-watchdog", daemon=True)
        self._threaded = True
        delivery.start()
        watchdog.start()
        scraping, ending = None, threading.Event()  # ending: set as the run ends, however it ends
        if self.serving is not None:
            scraping = threading.Thread(target=self._scrape_loop, args=(ending,), name="agent-serving", daemon=True)
            scraping.start()
        next_at = time.monotonic()
        try:
            while not stop.is_set():
                self.tick()
                if ticks is not None and self.ticks >= ticks:
                    break
                if self.ticks == 1 and self.offset_s is not None:
                    next_at = first_phased_tick(self.offset_s, self.interval_s, time.time(), time.monotonic())
                else:
                    next_at += self.interval_s
                behind = time.monotonic() - next_at
                if behind > 0:  # fell behind (a slow source): skip the missed ticks, do not burst; keep the phase
                    next_at += math.ceil(behind / self.interval_s) * self.interval_s
                stop.wait(next_at - time.monotonic())
        finally:
            ending.set()
            if scraping is not None:
                scraping.join(timeout=FETCH_JOIN_S)
            with self._handoff:
                done.set()
                self._handoff.notify()
            # The delivery thread writes what it holds and replays the spool
            # (at most a few seconds, each call bounded) before it ends.
            delivery.join()
            delivered.set()
            watchdog.join()
            self._threaded = False
            self._release()

    def tick(self, ts=None):
        ts = ts or datetime.now(timezone.utc)
        readings = self.source.read(ts)
        self.ticks += 1
        self.last_holders = tuple((r.device.uuid, h) for r in readings for h in r.holders)  # for the serving reads
        # Health events of devices the source could not read this tick: stored without a sample (the device
        # goes stale as it should).
        orphans = getattr(self.source, "orphans", ())
        batch = Batch(
            devices=[r.device for r in readings] + [info for info, _ in orphans],
            rows=[(r.device.uuid, ts, *r.values) for r in readings],
            holders=[(r.device.uuid, ts, h) for r in readings for h in r.holders],
            labels=self.labels,
            interval_s=self.interval_s,
            addresses=self.addresses,
            events=[(r.device.uuid, ts, *e) for r in readings for e in r.events]
            + [(info.uuid, ts, *e) for info, events in orphans for e in events],
        )
        self._submit(batch)

    def scrape(self, ts=None):
        """Read the node's serving deployments now and send what was counted (serving.Scraper)."""
        served = self.serving.scrape(ts, self.last_holders)
        if served:
            self._submit(Batch(devices=[], rows=[], labels=self.labels, interval_s=self.interval_s, served=served))
        self.serving.saved()  # what was counted is written, handed over or on disk: the next scrape counts from here

    def _scrape_loop(self, stop):
        """Read the deployments now (a run of a few ticks, ended before this thread got going, reads them once
        all the same), then every serving.every_s until `stop`."""
        next_at = time.monotonic()
        while True:
            try:
                self.scrape()
            except Exception:  # noqa: BLE001 - a fault of the agent's own must not end the node's scrapes
                log.exception("reading the serving deployments failed; trying again in %gs", self.serving.every_s)
            next_at += self.serving.every_s
            behind = time.monotonic() - next_at
            if behind > 0:
                next_at += math.ceil(behind / self.serving.every_s) * self.serving.every_s
            if stop.wait(next_at - time.monotonic()):
                return

    def _submit(self, batch):
        if not self._threaded:  # called on its own (a benchmark, one tick): deliver here
            self.deliver(batch)
            return
        with self._handoff:
            if self._busy or self._pending is not None or not self.spool.is_empty():
                self.spool.append(batch)  # on disk at once; the delivery thread replays it
            else:
                self._pending = batch
            self._handoff.notify()

    def _deliver_loop(self, done):
        while True:
            with self._handoff:
                if self._pending is None and not done.is_set():
                    self._handoff.wait(self.interval_s)
                batch, self._pending = self._pending, None
                self._busy = True
            closing = done.is_set()  # this pass delivers what is left before the agent ends
            try:
                if batch is not None:
                    self.deliver(batch)
                elif not done.is_set():
                    self.drain(budget_s=self.interval_s)
                if done.is_set() and self._pending is None:
                    self.drain(budget_s=5.0)
                    return
            except Exception:
                # Not the database (deliver and drain handle that): a fault of the agent's own, or of the disk
                # under the spool. The thread must not end over it, or every later tick would only pile up.
                log.exception("delivery failed; trying again in %gs", self.interval_s)
                if closing:
                    return  # the last drain failed too: what is left stays spooled, for the next start to replay
                # Then the next pass; once ticking has ended, it drains what was spooled meanwhile before it ends.
                done.wait(self.interval_s)
            finally:
                with self._handoff:
                    self._busy = False

    def _watch(self, delivered):
        """Cut off a database call that has run past its deadline (a server that answers nothing)."""
        while not delivered.wait(WATCH_EVERY_S):
            deadline = self._deadline
            if deadline is None or time.monotonic() < deadline:
                continue
            with self._conn_lock:
                if self._deadline is not deadline or self.conn is None:
                    continue  # that call ended meanwhile
                self._deadline = None
                log.warning("a write got no answer from the database in %gs; abandoning it", self.db_timeout_s)
                self.writes_abandoned += 1
                try:
                    # shutdown() on a duplicate acts on the shared socket: the
                    # blocked call sees the connection end and raises.
                    with socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
                        sock.shutdown(socket.SHUT_RDWR)
                except (OSError, psycopg.Error):
                    pass

    def deliver(self, batch):
        if not self.spool.is_empty():
            self.spool.append(batch)
            self.drain(budget_s=self.interval_s)
            return
        if self._connect() is None:
            self.spool.append(batch)
            return
        try:
            self.samples_written += self._write(batch).inserted
        except psycopg.OperationalError as exc:
            self._lost(exc)
            self.spool.append(batch)
        except psycopg.Error as exc:
            # Bad data, not a bad connection: retrying would fail the same way.
            log.error("dropped a batch of %d samples the database refused: %s", len(batch.rows), exc)

    def drain(self, budget_s=None):
        """Replay the spool while the database answers; return samples replayed."""
        if self.spool.is_empty() or self._connect() is None:
            return 0
        try:
            replayed = self.spool.replay(self._write_replayed, budget_s=budget_s)
        except psycopg.OperationalError as exc:
            self._lost(exc)
            return 0
        if self.spool.is_empty():
            log.info("spool replayed: the database has everything again")
        return replayed

    def _write(self, batch):
        self._deadline = time.monotonic() + self.db_timeout_s
        try:
            return self.writer.write(batch)
        finally:
            self._deadline = None

    def _write_replayed(self, batch):
        try:
            self.samples_written += self._write(batch).inserted
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            log.error("dropped a spooled batch of %d samples the database refused: %s", len(batch.rows), exc)
        except (TypeError, ValueError, OverflowError) as exc:
            # A value of its own no column takes (a source's fault): as deliver drops such a batch, the spool
            # drops it, and only it, instead of trying it again before everything behind it forever.
            raise Unwritable(str(exc)) from exc

    def _connect(self):
        if self.conn is not None and not self.conn.closed:
            return self.conn
        now = time.monotonic()
        if now < self._retry_at:
            return None
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s, **KEEPALIVE)
            # The server ends a statement that runs too long (a lock wait, a
            # stuck COPY) by itself; the watchdog covers a server that cannot.
            conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{int(self.db_timeout_s * 1000)}ms",))
        except psycopg.OperationalError as exc:
            self._lost(exc)
            return None
        self.conn = conn
        self.writer = Writer(self.conn)
        self._retry_s = RECONNECT_MIN_S
        if self._down:
            log.info("database reachable again")
        self._down = False
        return self.conn

    def _lost(self, exc):
        if not self._down:
            log.warning(
                "database unreachable (%s); spooling to %s and retrying",
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                self.spool.dir,
            )
        self._down = True
        self._drop_connection()
        self._retry_at = time.monotonic() + self._retry_s
        self._retry_s = min(RECONNECT_MAX_S, self._retry_s * 2)

    def _drop_connection(self):
        with self._conn_lock:
            conn, self.conn, self.writer = self.conn, None, None
            if conn is not None:
                try:
                    conn.close()
                except psycopg.Error:
                    pass

    def close(self):
        """Write what is spooled if the database answers, then release everything."""
        try:
            self.drain(budget_s=5.0)
        finally:
            self._release()

    def _release(self):
        self.source.close()
        self.spool.close()
        self._drop_connection()

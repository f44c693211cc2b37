"""The agent loop: read the source every tick, write the batch, spool when the database is away.

Each tick's batch is written at once (one transaction) or appended to the
spool, so a SIGKILL loses at most the tick being read. While the spool holds
anything, new batches go behind it and the spool is replayed, oldest first,
for up to one interval per tick, so sampling never stops for a long replay.
"""

import logging
import threading
import time
from datetime import datetime, timezone

import psycopg

from .batch import Batch
from .writer import Writer

log = logging.getLogger("collector.agent")

# Seconds between reconnect attempts while the database is unreachable (doubling up to the max).
RECONNECT_MIN_S = 1.0
RECONNECT_MAX_S = 30.0


class Agent:
    def __init__(self, source, dsn, spool, interval_s=1.0, labels=None, connect_timeout_s=3):
        self.source = source
        self.dsn = dsn
        self.spool = spool
        self.interval_s = interval_s
        self.labels = dict(labels or {})
        self.connect_timeout_s = connect_timeout_s
        self.conn = None
        self.writer = None
        self.ticks = 0
        self.samples_written = 0
        self._retry_at = 0.0
        self._retry_s = RECONNECT_MIN_S
        self._down = False

    def run(self, stop=None, ticks=None):
        """Tick every interval until `stop` (a threading.Event) is set or `ticks` ticks ran."""
        stop = stop or threading.Event()
        next_at = time.monotonic()
        try:
            while not stop.is_set():
                self.tick()
                if ticks is not None and self.ticks >= ticks:
                    break
                next_at += self.interval_s
                delay = next_at - time.monotonic()
                if delay < 0:  # fell behind (slow database): skip the missed ticks, do not burst
                    next_at = time.monotonic()
                    delay = 0
                stop.wait(delay)
        finally:
            self.close()

    def tick(self, ts=None):
        ts = ts or datetime.now(timezone.utc)
        readings = self.source.read(ts)
        self.ticks += 1
        batch = Batch(
            devices=[r.device for r in readings],
            rows=[(r.device.uuid, ts, *r.values) for r in readings],
            holders=[(r.device.uuid, ts, h) for r in readings for h in r.holders],
            labels=self.labels,
            interval_s=self.interval_s,
        )
        self.deliver(batch)

    def deliver(self, batch):
        if not self.spool.is_empty():
            self.spool.append(batch)
            self.drain(budget_s=self.interval_s)
            return
        if self._connect() is None:
            self.spool.append(batch)
            return
        try:
            self.samples_written += self.writer.write(batch).inserted
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

    def _write_replayed(self, batch):
        try:
            self.samples_written += self.writer.write(batch).inserted
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            log.error("dropped a spooled batch of %d samples the database refused: %s", len(batch.rows), exc)

    def _connect(self):
        if self.conn is not None and not self.conn.closed:
            return self.conn
        now = time.monotonic()
        if now < self._retry_at:
            return None
        try:
            self.conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s)
        except psycopg.OperationalError as exc:
            self._lost(exc)
            return None
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
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error:
                pass
        self.conn = None
        self.writer = None
        self._retry_at = time.monotonic() + self._retry_s
        self._retry_s = min(RECONNECT_MAX_S, self._retry_s * 2)

    def close(self):
        """Write what is spooled if the database answers, then release everything."""
        try:
            self.drain(budget_s=5.0)
        finally:
            self.source.close()
            self.spool.close()
            if self.conn is not None:
                self.conn.close()
                self.conn = None

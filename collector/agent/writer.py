"""Write batches into PostgreSQL: binary COPY, idempotent on (device, ts).

The fast path COPYs a batch straight into `telemetry_sample`. A batch that
repeats rows already stored (a spool replayed after a commit whose reply was
lost, a file imported twice) fails that COPY with a unique violation; the
writer then COPYs the batch into a temporary table and moves it across with
`INSERT ... ON CONFLICT DO NOTHING`, so a replayed batch adds nothing. New
data, the common case, pays only for the COPY.

In the same transaction it registers nodes and devices it has not seen on
this connection, updates `telemetry_latest` (one row per device), marks the
(device, hour) pairs the rollup task must recompute, and records who holds
each device.
"""

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from psycopg import errors

from . import schema

log = logging.getLogger("collector.agent")

# Samples stamped further ahead than this are refused: a node with a wrong
# clock would otherwise write rows that sort after every honest one.
FUTURE_LIMIT = timedelta(minutes=5)

_COLS = ", ".join(schema.SAMPLE_COLUMNS)
_COPY_SAMPLES = f"COPY telemetry_sample ({_COLS}) FROM STDIN (FORMAT BINARY)"
_COPY_STAGING = f"COPY telemetry_staging ({_COLS}) FROM STDIN (FORMAT BINARY)"
_ARRAY_TYPES = ", ".join(f"%b::{t}[]" for t in schema.SAMPLE_COPY_TYPES)
_UPSERT_LATEST = (
    f"INSERT INTO telemetry_latest ({_COLS}) SELECT * FROM unnest({_ARRAY_TYPES}) "
    "ON CONFLICT (device_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in schema.SAMPLE_COLUMNS[1:])
    + " WHERE telemetry_latest.ts < excluded.ts"
)
# DO UPDATE, not DO NOTHING: it locks the existing row even when its WHERE is
# false (in-order data: no new row version written), and that lock orders this
# writer against a rollup that has claimed the same row, so no committed
# sample is missed.
_MARK_PENDING = (
    "INSERT INTO telemetry_rollup_pending (device_id, hour, from_ts) "
    "SELECT * FROM unnest(%b::int4[], %b::timestamptz[], %b::timestamptz[]) "
    "ON CONFLICT (device_id, hour) DO UPDATE SET from_ts = excluded.from_ts "
    "WHERE excluded.from_ts < telemetry_rollup_pending.from_ts"
)
# A holder unseen for longer than a gap starts a new holding (a reused PID).
_UPSERT_HOLDERS = (
    "INSERT INTO telemetry_device_holder (device_id, holder, pid, used_mem_mib, first_seen, last_seen) "
    "SELECT * FROM unnest(%s::int4[], %s::text[], %s::int4[], %s::int4[], %s::timestamptz[], %s::timestamptz[]) "
    "ON CONFLICT (device_id, holder) DO UPDATE SET "
    f"first_seen = CASE WHEN excluded.first_seen - telemetry_device_holder.last_seen > interval '{schema.MAX_GAP_S} seconds' "
    "THEN excluded.first_seen ELSE least(telemetry_device_holder.first_seen, excluded.first_seen) END, "
    "last_seen = greatest(telemetry_device_holder.last_seen, excluded.last_seen), "
    "pid = excluded.pid, used_mem_mib = excluded.used_mem_mib"
)
_UPSERT_NODE = (
    "INSERT INTO collector_node (name, labels, interval_s) VALUES (%(name)s, %(labels)s::jsonb, coalesce(%(interval)s::float8, 1)) "
    "ON CONFLICT (name) DO UPDATE SET labels = collector_node.labels || excluded.labels, "
    "interval_s = coalesce(%(interval)s::float8, collector_node.interval_s), registered_at = now() "
    "RETURNING id"
)
_UPSERT_DEVICES = (
    "INSERT INTO collector_device (uuid, node_id, index, model, source, simulated, power_estimated, mem_total_mib) "
    "SELECT * FROM unnest(%s::text[], %s::int8[], %s::int4[], %s::text[], %s::text[], %s::bool[], %s::bool[], %s::int4[]) "
    "ON CONFLICT (uuid) DO UPDATE SET node_id = excluded.node_id, index = excluded.index, "
    "model = excluded.model, source = excluded.source, simulated = excluded.simulated, "
    "power_estimated = excluded.power_estimated, "
    "mem_total_mib = coalesce(excluded.mem_total_mib, collector_device.mem_total_mib), registered_at = now() "
    "RETURNING uuid, id"
)


@dataclass
class WriteResult:
    inserted: int = 0  # new samples stored
    duplicates: int = 0  # samples already stored, left as they were
    rejected_future: int = 0  # samples stamped more than FUTURE_LIMIT ahead


class Writer:
    """Writes `Batch`es through one psycopg connection (autocommit or inside a transaction).

    Caches the ids of registered nodes and devices for the life of the
    connection; `forget()` drops the cache (after a reconnect or a failed write).
    """

    def __init__(self, conn):
        self.conn = conn
        self._nodes = {}  # (name, labels json, interval_s) -> node id
        self._devices = {}  # DeviceInfo -> device id
        self._staging_ready = False

    def forget(self):
        self._nodes.clear()
        self._devices.clear()
        self._staging_ready = False

    def write(self, batch, now=None):
        """Store `batch` in one transaction and return a WriteResult."""
        limit = (now or datetime.now(timezone.utc)) + FUTURE_LIMIT
        try:
            with self.conn.transaction(), self.conn.cursor() as cur:
                ids = self._register(cur, batch)
                rows, latest, first, rejected = _prepare(batch.rows, ids, limit)
                result = WriteResult(rejected_future=rejected)
                if rejected:
                    log.warning(
                        "rejected %d samples stamped more than %d minutes in the future "
                        "(is this node's clock right?)",
                        rejected,
                        FUTURE_LIMIT.seconds // 60,
                    )
                if rows:
                    result.inserted = self._store(cur, rows)
                    result.duplicates = len(rows) - result.inserted
                    cur.execute(_UPSERT_LATEST, [list(col) for col in zip(*latest.values())])
                    cur.execute(_MARK_PENDING, _pending(first, latest))
                if batch.holders:
                    self._store_holders(cur, batch.holders, ids, limit)
        except BaseException:
            # Ids registered in a rolled-back transaction do not exist.
            self.forget()
            raise
        return result

    def _register(self, cur, batch):
        new = [d for d in dict.fromkeys(batch.devices) if d not in self._devices]
        if new:
            node_ids = [self._node_id(cur, d.node, batch) for d in new]
            cur.execute(
                _UPSERT_DEVICES,
                [
                    [d.uuid for d in new],
                    node_ids,
                    [d.index for d in new],
                    [d.model for d in new],
                    [d.source for d in new],
                    [d.simulated for d in new],
                    [d.power_estimated for d in new],
                    [d.mem_total_mib for d in new],
                ],
            )
            ids = dict(cur.fetchall())
            for d in new:
                self._devices[d] = ids[d.uuid]
        return {d.uuid: self._devices[d] for d in batch.devices}

    def _node_id(self, cur, name, batch):
        labels = json.dumps(batch.labels, sort_keys=True)
        key = (name, labels, batch.interval_s)
        if key not in self._nodes:
            cur.execute(_UPSERT_NODE, {"name": name, "labels": labels, "interval": batch.interval_s})
            self._nodes[key] = cur.fetchone()[0]
        return self._nodes[key]

    def _store(self, cur, rows):
        """COPY `rows`; return how many were new."""
        for attempt in (1, 2):
            try:
                try:
                    with self.conn.transaction():
                        _copy(cur, _COPY_SAMPLES, rows)
                    return len(rows)
                except errors.UniqueViolation:
                    with self.conn.transaction():
                        return self._insert_new(cur, rows)
            except errors.CheckViolation as exc:
                # "no partition of relation telemetry_sample found for row":
                # the periodic task makes days ahead; old imports need old days.
                if attempt == 2 or "partition" not in str(exc):
                    raise
                days = {row[1].astimezone(timezone.utc).date() for row in rows}
                with self.conn.transaction():
                    created = schema.ensure_partitions(cur, days)
                log.info("created partitions %s", ", ".join(created) or "(none needed)")
        raise AssertionError("unreachable")

    def _insert_new(self, cur, rows):
        if not self._staging_ready:
            cur.execute(
                "CREATE TEMP TABLE IF NOT EXISTS telemetry_staging "
                "(LIKE telemetry_sample INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
            )
            self._staging_ready = True
        cur.execute("TRUNCATE telemetry_staging")
        _copy(cur, _COPY_STAGING, rows)
        cur.execute("INSERT INTO telemetry_sample SELECT * FROM telemetry_staging ON CONFLICT DO NOTHING")
        inserted = cur.rowcount
        cur.execute("TRUNCATE telemetry_staging")
        return inserted

    def _store_holders(self, cur, holders, ids, limit):
        seen = {}  # (device id, holder) -> [pid, mem, first, last]
        for uuid, ts, h in holders:
            if ts > limit:
                continue
            key = (ids[uuid], h.holder)
            entry = seen.get(key)
            if entry is None:
                seen[key] = [h.pid, h.used_mem_mib, ts, ts]
            else:
                entry[2] = min(entry[2], ts)
                if ts >= entry[3]:
                    entry[0], entry[1], entry[3] = h.pid, h.used_mem_mib, ts
        if not seen:
            return
        keys = sorted(seen)
        cur.execute(
            _UPSERT_HOLDERS,
            [
                [k[0] for k in keys],
                [k[1] for k in keys],
                [seen[k][0] for k in keys],
                [seen[k][1] for k in keys],
                [seen[k][2] for k in keys],
                [seen[k][3] for k in keys],
            ],
        )


def _copy(cur, statement, rows):
    with cur.copy(statement) as copy:
        copy.set_types(schema.SAMPLE_COPY_TYPES)
        write_row = copy.write_row
        for row in rows:
            write_row(row)


def _prepare(rows, ids, limit):
    """Swap UUIDs for ids and drop rows from the future.

    Return (rows, newest row per device id, oldest ts per device id, rejected count).
    """
    out = []
    append = out.append
    latest = {}
    first = {}
    rejected = 0
    for row in rows:
        ts = row[1]
        if ts > limit:
            rejected += 1
            continue
        try:
            device_id = ids[row[0]]
        except KeyError:
            raise ValueError(f"sample for device {row[0]!r}, which the batch does not list") from None
        row = (device_id, *row[1:])
        append(row)
        newest = latest.get(device_id)
        if newest is None:
            latest[device_id] = row
            first[device_id] = ts
        elif ts > newest[1]:
            latest[device_id] = row
        elif ts < first[device_id]:
            first[device_id] = ts
    return out, latest, first, rejected


def _pending(first, latest):
    """Return the (device ids, hours, from_ts) arrays of the hours a batch touched, sorted."""
    entries = []
    for device_id, lo in first.items():
        lo = lo.astimezone(timezone.utc)
        hi = latest[device_id][1]
        hour = lo.replace(minute=0, second=0, microsecond=0)
        start = lo
        while hour <= hi:
            entries.append((device_id, hour, start))
            hour += timedelta(hours=1)
            start = hour
    entries.sort()
    return [[e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]]

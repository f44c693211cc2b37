"""Write batches into PostgreSQL: binary COPY, idempotent on (device, ts).

The fast path COPYs a batch straight into `telemetry_sample`. A batch that
repeats rows already stored (a spool replayed after a commit whose reply was
lost, a file imported twice) fails that COPY with a unique violation; the
writer rolls the write back and does it again, this time COPYing the batch
into a temporary table and moving it across with `INSERT ... ON CONFLICT DO
NOTHING`, so a replayed batch adds nothing. New data, the common case, pays
only for the COPY (no savepoint around it: the retry redoes the whole write).

In the same transaction it registers nodes and devices it has not seen on
this connection and, in one statement right after the COPY, updates
`telemetry_latest` (one row per device) and marks the (device, hour) pairs
the rollup task must recompute for samples older than the roll-up watermark
(late or replayed data; live samples are newer and need none); it also
records who holds each device, and NOTIFYs schema.WRITES_CHANNEL (heard at
commit by the live fleet's publisher). That
statement gets only the batch's newest row and oldest ts per device, as
binary arrays. The per-row work on the client (ids for UUIDs, future check,
newest/oldest per device) is map/zip in C, and what can wait is done while
the server is still digesting the COPY.
"""

import functools
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from operator import itemgetter
from operator import le as _le

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus

from . import schema
from .pgbinary import BinaryArray, BinaryArrayDumper, binary_array, binary_records

log = logging.getLogger("collector.agent")

# Samples stamped further ahead than this are refused: a node with a wrong
# clock would otherwise write rows that sort after every honest one.
FUTURE_LIMIT = timedelta(minutes=5)

_COLS = ", ".join(schema.SAMPLE_COLUMNS)
_COPY_SAMPLES = f"COPY telemetry_sample ({_COLS}) FROM STDIN (FORMAT BINARY)"
_COPY_STAGING = f"COPY telemetry_staging ({_COLS}) FROM STDIN (FORMAT BINARY)"
_SET_LATEST = ", ".join(f"{c} = v.{c}" for c in schema.SAMPLE_COLUMNS[1:])
_SET_EXCLUDED = ", ".join(f"{c} = excluded.{c}" for c in schema.SAMPLE_COLUMNS[1:])
_V_COLS = ", ".join(f"v.{c}" for c in schema.SAMPLE_COLUMNS)
# One statement per batch, fed the batch's newest row of each device (sorted
# by device id) and that device's oldest ts in the batch (`lo`):
# - telemetry_latest: an UPDATE (cheaper than an upsert: no speculative
#   insertion) that only ever moves a row forward (l.ts < v.ts, re-checked on
#   the newest row version when a concurrent writer got there first), and,
#   unless this writer knows every device has its row, an upsert with the same
#   guard for devices that have none yet. Both see the same snapshot, so no row
#   is touched twice.
# - telemetry_rollup_pending, only for devices with samples older than the
#   watermark's `upto` (the roll-up marks newer ones when it moves the line;
#   the shared advisory lock taken before the COPY keeps the line still until
#   this write commits): every UTC hour from `lo` to the newest ts or `upto`,
#   from_ts the oldest ts in that hour. DO UPDATE, not DO NOTHING: it locks the
#   existing row even when its WHERE is false (in-order data: no new row
#   version written), and that lock orders this writer against a rollup that
#   has claimed the same row (the rollup deletes it; this insert waits, finds
#   it gone and inserts it again), so no committed sample is missed. Rows come
#   in (device, hour) order: the arrays are sorted by device id (no sort node).
# It runs in the write's transaction right after the COPY; the transaction
# commits samples, latest and pending marks together or none of them.
def _mark_sql(add_new, records):
    added = (
        f"added AS (INSERT INTO telemetry_latest ({_COLS}) SELECT {_V_COLS} FROM v "
        "WHERE NOT EXISTS (SELECT FROM telemetry_latest l WHERE l.device_id = v.device_id) "
        f"ORDER BY v.device_id ON CONFLICT (device_id) DO UPDATE SET {_SET_EXCLUDED} "
        "WHERE telemetry_latest.ts < excluded.ts) "
    )
    if records:  # one array of telemetry_mark rows: one set to unnest, not twelve
        rows = "SELECT * FROM unnest(%b::telemetry_mark[])"
    else:
        rows = ("SELECT * FROM unnest(" + ", ".join(f"%b::{t}[]" for t in _MARK_TYPES) + f") AS v({_COLS}, lo)")
    return (
        f"WITH v AS ({rows}), "
        f"moved AS (UPDATE telemetry_latest l SET {_SET_LATEST} FROM v "
        "WHERE l.device_id = v.device_id AND l.ts < v.ts) "
        + (", " + added if add_new else "")
        + "INSERT INTO telemetry_rollup_pending (device_id, hour, from_ts) "
        "SELECT v.device_id, h.hour, greatest(v.lo, h.hour) FROM v CROSS JOIN telemetry_rollup_watermark w "
        "CROSS JOIN LATERAL generate_series(date_trunc('hour', v.lo, 'UTC'), least(v.ts, w.upto), "
        "interval '1 hour') AS h(hour) WHERE v.lo < w.upto "
        "ON CONFLICT (device_id, hour) DO UPDATE SET from_ts = excluded.from_ts "
        "WHERE excluded.from_ts < telemetry_rollup_pending.from_ts"
    )


# [add_new][records]: with the upsert for devices that may have no latest row
# yet, or without it (every device of the batch got its row in a write this
# writer committed); fed one array of `telemetry_mark` rows, or, when a column
# mixes values and NULLs, one array per column.
_MARK_TYPES = schema.SAMPLE_COPY_TYPES + ("timestamptz",)
_MARK = {add_new: {records: _mark_sql(add_new, records) for records in (False, True)} for add_new in (False, True)}
# With it, the NOTIFY that tells the live fleet's publisher of new samples (sent at commit, none on a rollback),
# and no JIT for the rest of the write: the planner's guesses for the marks (a watermark table it never analyzed,
# generate_series) cost it past jit_above_cost, and a server built with LLVM then spent 200 ms of a 260 ms
# write of 10,000 devices compiling it (PostgreSQL 15, Debian's build).
_HOLD_WATERMARK = (f"SELECT pg_advisory_xact_lock_shared({schema.WATERMARK_LOCK}), "
                   f"pg_notify('{schema.WRITES_CHANNEL}', ''), set_config('jit', 'off', true)")
# A holder unseen for longer than a gap starts a new holding (a reused PID).
# Lineage travels as text (an array literal, a JSON object) per holder: unnest
# would flatten a two-dimensional array of ancestors.
_UPSERT_HOLDERS = (
    "INSERT INTO telemetry_device_holder "
    "(device_id, holder, pid, used_mem_mib, first_seen, last_seen, ancestor_pids, launcher_ids) "
    "SELECT d, h, p, m, f, l, a::int4[], j::jsonb FROM unnest(%s::int4[], %s::text[], %s::int4[], %s::int4[], "
    "%s::timestamptz[], %s::timestamptz[], %s::text[], %s::text[]) AS t(d, h, p, m, f, l, a, j) "
    "ON CONFLICT (device_id, holder) DO UPDATE SET "
    f"first_seen = CASE WHEN excluded.first_seen - telemetry_device_holder.last_seen > interval '{schema.MAX_GAP_S} seconds' "
    "THEN excluded.first_seen ELSE least(telemetry_device_holder.first_seen, excluded.first_seen) END, "
    "last_seen = greatest(telemetry_device_holder.last_seen, excluded.last_seen), "
    "pid = excluded.pid, used_mem_mib = excluded.used_mem_mib, "
    "ancestor_pids = excluded.ancestor_pids, launcher_ids = excluded.launcher_ids"
)
# Health events (schema.HEALTH_SQL); one already stored (a replayed spool) is left as it is.
_INSERT_EVENTS = (
    "INSERT INTO telemetry_device_event (device_id, ts, kind, code, detail, critical) "
    "SELECT * FROM unnest(%s::int4[], %s::timestamptz[], %s::text[], %s::int8[], %s::text[], %s::bool[]) "
    "ON CONFLICT DO NOTHING"
)
# Every node of a batch's new devices in one statement (a simulated fleet has hundreds).
# A batch without addresses (a source that reads another machine, an older spool) leaves the node's as they are.
_UPSERT_NODES = (
    "INSERT INTO collector_node (name, labels, interval_s, addresses) "
    "SELECT n, %(labels)s::jsonb, coalesce(%(interval)s::float8, 1), %(addresses)s::text[] "
    "FROM unnest(%(names)s::text[]) AS n "
    "ON CONFLICT (name) DO UPDATE SET labels = collector_node.labels || excluded.labels, "
    "interval_s = coalesce(%(interval)s::float8, collector_node.interval_s), registered_at = now(), "
    "addresses = CASE WHEN cardinality(excluded.addresses) > 0 THEN excluded.addresses "
    "ELSE collector_node.addresses END "
    "RETURNING name, id"
)
_UPSERT_DEVICES = (
    "INSERT INTO collector_device (uuid, node_id, index, model, source, simulated, power_estimated, mem_total_mib, "
    "arch, mig_mode, power_scopes) "
    "SELECT * FROM unnest(%s::text[], %s::int8[], %s::int4[], %s::text[], %s::text[], %s::bool[], %s::bool[], %s::int4[], "
    "%s::text[], %s::bool[], %s::text[]) "
    "ON CONFLICT (uuid) DO UPDATE SET node_id = excluded.node_id, index = excluded.index, "
    "model = excluded.model, source = excluded.source, simulated = excluded.simulated, "
    "power_estimated = excluded.power_estimated, "
    "mem_total_mib = coalesce(excluded.mem_total_mib, collector_device.mem_total_mib), "
    "arch = excluded.arch, mig_mode = excluded.mig_mode, power_scopes = excluded.power_scopes, registered_at = now() "
    "RETURNING uuid, id"
)


@dataclass
class WriteResult:
    inserted: int = 0  # new samples stored
    duplicates: int = 0  # samples already stored, left as they were
    rejected_future: int = 0  # samples stamped more than FUTURE_LIMIT ahead
    served: int = 0  # serving counts stored (one per deployment, model and scrape)


class Writer:
    """Writes `Batch`es through one psycopg connection (autocommit or inside a transaction).

    Caches the ids of registered nodes and devices for the life of the
    connection; `forget()` drops the cache (after a reconnect or a failed write).
    """

    def __init__(self, conn):
        self.conn = conn
        self._nodes = {}  # (name, labels json, interval_s, addresses) -> node id
        self._devices = {}  # DeviceInfo -> device id
        self._last = None  # (the last batch's devices, their {uuid: id})
        self._have_latest = set()  # device ids whose telemetry_latest row a write of ours committed
        self._staging_ready = False
        self._mark_type = None  # oid of the telemetry_mark row type

    def forget(self):
        self._nodes.clear()
        self._devices.clear()
        self._last = None
        self._have_latest.clear()
        self._staging_ready = False
        self._mark_type = None

    def write(self, batch, now=None):
        """Store `batch` in one transaction and return a WriteResult."""
        limit = (now or datetime.now(timezone.utc)) + FUTURE_LIMIT
        dedupe = False  # True once the fast COPY met a row already stored
        created_for = None
        try:
            while True:
                try:
                    result = self._write_once(batch, limit, dedupe)
                except _Duplicate:
                    # Rolled back whole: do it again through the staging table.
                    self.forget()
                    if dedupe:
                        raise AssertionError("unique violation from the de-duplicating path") from None
                    dedupe = True
                    continue
                except _NoPartition as missing:
                    # "no partition of relation telemetry_sample found for row":
                    # the periodic task makes days ahead; old imports need old days.
                    self.forget()
                    if created_for is not None:
                        raise missing.__cause__ from None
                    created_for = missing.days
                    with self.conn.transaction(), self.conn.cursor() as cur:
                        created = schema.ensure_partitions(cur, missing.days)
                    log.info("created partitions %s", ", ".join(created) or "(none needed)")
                    continue
                break
        except BaseException:
            # Ids registered in a rolled-back transaction do not exist.
            self.forget()
            raise
        if result.rejected_future:
            log.warning(
                "rejected %d samples stamped more than %d minutes in the future "
                "(is this node's clock right?)",
                result.rejected_future,
                FUTURE_LIMIT.seconds // 60,
            )
        return result

    def _write_once(self, batch, limit, dedupe):
        # Our own transaction (not a savepoint in someone else's), whose commit is final?
        top_level = self.conn.info.transaction_status == TransactionStatus.IDLE
        # A plain (server-binding) cursor even on a connection whose factory
        # binds on the client (Django's): the arrays of _MARK travel in binary.
        with self.conn.transaction(), psycopg.Cursor(self.conn) as cur:
            ids = self._register(cur, batch)
            accepted = _accept(batch.rows, ids, limit)
            rows = accepted.rows
            result = WriteResult(rejected_future=accepted.rejected)
            if rows:
                # Held to commit: the roll-up cannot move the watermark under this write.
                cur.execute(_HOLD_WATERMARK)
                mark_oid = self._mark_oid(cur)
                if dedupe:
                    result.inserted = self._insert_new(cur, list(accepted.copy_rows()))
                else:
                    try:
                        # The marks are computed inside the COPY, after its last row:
                        # the server is still working through the rows buffered ahead
                        # of it (it, not this loop, is the slower side), so that
                        # client work costs no wall time.
                        _copy(cur, _COPY_SAMPLES, accepted.copy_rows(), then=functools.partial(accepted.mark, mark_oid))
                    except errors.UniqueViolation:
                        raise _Duplicate() from None
                    except errors.CheckViolation as exc:
                        if "partition" not in str(exc):
                            raise
                        raise _NoPartition({row[1].astimezone(timezone.utc).date() for row in rows}) from exc
                    result.inserted = len(rows)
                result.duplicates = len(rows) - result.inserted
                marks, device_ids = accepted.mark(mark_oid)
                cur.adapters.register_dumper(BinaryArray, BinaryArrayDumper)
                cur.execute(_MARK[not self._have_latest.issuperset(device_ids)][len(marks) == 1], marks)
            if batch.holders:
                self._store_holders(cur, batch.holders, ids, limit)
            if batch.served:
                result.served = _store_served(cur, batch.served)
            if batch.events:
                cur.execute(_INSERT_EVENTS, [[ids[e[0]] for e in batch.events], *map(list, zip(*(e[1:] for e in batch.events)))])
        if rows and top_level:
            self._have_latest.update(device_ids)
        return result

    def _mark_oid(self, cur):
        """The oid of the `telemetry_mark` row type (a binary array of rows names it), once per connection."""
        if self._mark_type is None:
            cur.execute("SELECT 'telemetry_mark'::regtype::oid")
            self._mark_type = cur.fetchone()[0]
        return self._mark_type

    def _register(self, cur, batch):
        if self._last is not None and self._last[0] == batch.devices:
            # The same devices as the last batch (every tick, usually): a list
            # comparison, mostly by identity, instead of hashing each DeviceInfo.
            return self._last[1]
        new = [d for d in dict.fromkeys(batch.devices) if d not in self._devices]
        if new:
            node_ids = self._node_ids(cur, [d.node for d in new], batch)
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
                    [d.arch for d in new],
                    [d.mig_mode for d in new],
                    [d.power_scopes for d in new],
                ],
            )
            ids = dict(cur.fetchall())
            for d in new:
                self._devices[d] = ids[d.uuid]
        ids = {d.uuid: self._devices[d] for d in batch.devices}
        self._last = (list(batch.devices), ids)
        return ids

    def _node_ids(self, cur, names, batch):
        """The ids of nodes `names` (registering those not seen with these labels and interval), in order."""
        labels = json.dumps(batch.labels, sort_keys=True)
        addresses = tuple(batch.addresses)
        keys = [(name, labels, batch.interval_s, addresses) for name in names]
        missing = sorted({key[0] for key in keys if key not in self._nodes})
        if missing:
            cur.execute(_UPSERT_NODES, {"names": missing, "labels": labels, "interval": batch.interval_s,
                                        "addresses": list(addresses)})
            for name, node_id in cur.fetchall():
                self._nodes[(name, labels, batch.interval_s, addresses)] = node_id
        return [self._nodes[key] for key in keys]

    def _insert_new(self, cur, rows):
        if not self._staging_ready:
            cur.execute(
                "CREATE TEMP TABLE IF NOT EXISTS telemetry_staging "
                "(LIKE telemetry_sample INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
            )
            self._staging_ready = True
        cur.execute("TRUNCATE telemetry_staging")
        _copy(cur, _COPY_STAGING, rows)
        try:
            cur.execute("INSERT INTO telemetry_sample SELECT * FROM telemetry_staging ON CONFLICT DO NOTHING")
        except errors.CheckViolation as exc:
            if "partition" not in str(exc):
                raise
            raise _NoPartition({row[1].astimezone(timezone.utc).date() for row in rows}) from exc
        inserted = cur.rowcount
        cur.execute("TRUNCATE telemetry_staging")
        return inserted

    def _store_holders(self, cur, holders, ids, limit):
        seen = {}  # (device id, holder) -> [pid, mem, first, last, newest Holder]
        for uuid, ts, h in holders:
            if ts > limit:
                continue
            key = (ids[uuid], h.holder)
            entry = seen.get(key)
            if entry is None:
                seen[key] = [h.pid, h.used_mem_mib, ts, ts, h]
            else:
                entry[2] = min(entry[2], ts)
                if ts >= entry[3]:
                    entry[0], entry[1], entry[3], entry[4] = h.pid, h.used_mem_mib, ts, h
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
                ["{" + ",".join(map(str, seen[k][4].ancestors)) + "}" for k in keys],
                [json.dumps(seen[k][4].launcher_ids, sort_keys=True) for k in keys],
            ],
        )


# A serving deployment's counts of one read, per model (collector/agent/serving.py; collector.models.ServedCount):
# once, whatever the replays. A target deleted since the read takes none.
_SERVED_FIELDS = ("prompt_tokens", "generation_tokens", "requests", "cached_prompt_tokens", "prefill_seconds",
                  "decode_seconds", "ttft_sum", "ttft_count", "itl_sum", "itl_count", "running", "waiting",
                  "kv_cache_usage", "restarted")
_INSERT_SERVED = (f"INSERT INTO collector_servedcount (target_id, ts, model, {', '.join(_SERVED_FIELDS)}) "
                  f"SELECT t.id, %s, %s, {', '.join(['%s'] * len(_SERVED_FIELDS))} FROM collector_scrapetarget t "
                  "WHERE t.name = %s ON CONFLICT (target_id, model, ts) DO NOTHING")
# The page's outcome, newest scrape first: a replayed older one changes nothing.
_SERVED_STATE = """UPDATE collector_scrapetarget SET checked_at = %(ts)s,
    read_at = CASE WHEN %(error)s = '' THEN %(ts)s ELSE read_at END,
    engine_read = CASE WHEN %(error)s = '' THEN %(engine)s ELSE engine_read END,
    unreadable_since = CASE WHEN %(error)s = '' THEN NULL ELSE coalesce(unreadable_since, %(ts)s) END,
    unreadable = %(error)s, pid = %(pid)s
  WHERE name = %(name)s AND (checked_at IS NULL OR checked_at < %(ts)s)"""


# The GPUs a deployment's processes held at a read (collector.models.TargetHold), once whatever the replays.
_INSERT_HOLDS = ("INSERT INTO collector_targethold (target_id, ts, device) SELECT t.id, %s, unnest(%s::text[]) "
                 "FROM collector_scrapetarget t WHERE t.name = %s ON CONFLICT (target_id, device, ts) DO NOTHING")


def _store_served(cur, served):
    rows = [(s.ts, model, *(f.get(k) for k in _SERVED_FIELDS[:-1]), bool(f.get("restarted")), s.deployment)
            for s in served for model, f in s.models]
    if rows:
        cur.executemany(_INSERT_SERVED, rows)
    cur.executemany(_SERVED_STATE, [{"ts": s.ts, "error": s.error, "engine": s.engine, "name": s.deployment,
                                     "pid": s.pid} for s in served])
    held = [(s.ts, list(s.devices), s.deployment) for s in served if s.devices]
    if held:
        cur.executemany(_INSERT_HOLDS, held)
    return len(rows)


def _copy(cur, statement, rows, then=None):
    """COPY `rows` (an iterable) in binary; call `then()` after the last row, before the COPY ends."""
    with cur.copy(statement) as copy:
        copy.set_types(schema.SAMPLE_COPY_TYPES)
        write_row = copy.write_row
        for row in rows:
            write_row(row)
        if then is not None:
            then()


class _Duplicate(Exception):
    """The fast COPY met a (device, ts) already stored; the write was rolled back."""


class _NoPartition(Exception):
    """A row's day has no partition; the write was rolled back."""

    def __init__(self, days):
        super().__init__(days)
        self.days = days


_UUID = itemgetter(0)
_TS = itemgetter(1)
_VALUES = itemgetter(slice(1, None))


class _Accepted:
    """The rows of a batch that will be written, and the marks they call for."""

    __slots__ = ("rows", "uuids", "stamps", "in_order", "ids", "rejected", "_marks")

    def __init__(self, rows, uuids, stamps, in_order, ids, rejected):
        self.rows, self.uuids, self.stamps, self.in_order = rows, uuids, stamps, in_order
        self.ids, self.rejected = ids, rejected
        self._marks = None

    def copy_rows(self):
        """The COPY rows, lazily: each row with its device id in place of the UUID."""
        return map(tuple.__add__, zip(map(self.ids.__getitem__, self.uuids)), map(_VALUES, self.rows))

    def mark(self, record_oid=None):
        """(The parameters of `_MARK`, the device ids), computed once: the newest row of each
        device (ids for UUIDs, sorted by id) with its oldest ts, as one array of rows of type
        `record_oid` (telemetry_mark) when it can be, else as one array per column."""
        if self._marks is None:
            self._marks = _marks(self.rows, self.uuids, self.stamps, self.in_order, self.ids, record_oid)
        return self._marks


def _accept(rows, ids, limit):
    """Drop rows from the future; check every row's device is listed (map/zip: the per-row work stays in C)."""
    stamps = list(map(_TS, rows))
    in_order = all(map(_le, stamps, stamps[1:]))
    rejected = 0
    if stamps and (stamps[-1] if in_order else max(stamps)) > limit:
        kept = [row for row in rows if row[1] <= limit]
        rejected = len(rows) - len(kept)
        rows = kept
        stamps = list(map(_TS, rows))
    uuids = list(map(_UUID, rows))
    if not ids.keys() >= set(uuids):
        missing = next(u for u in uuids if u not in ids)
        raise ValueError(f"sample for device {missing!r}, which the batch does not list")
    return _Accepted(rows, uuids, stamps, in_order, ids, rejected)


def _marks(rows, uuids, stamps, in_order, ids, record_oid=None):
    if in_order:
        # In time order (every batch the agent makes): a device's last row is
        # its newest, its first row's ts its oldest. A batch of whole ticks
        # ends (and starts) with one row of every device it lists: when the
        # last (first) len(ids) rows hold them all, only those are looked at.
        n = len(ids)
        newest = dict(zip(uuids[-n:], rows[-n:]))
        if len(newest) < n:
            newest = dict(zip(uuids, rows))
        oldest = dict(zip(reversed(uuids[:n]), reversed(stamps[:n])))
        if len(oldest) < n:
            oldest = dict(zip(reversed(uuids), reversed(stamps)))
    else:
        newest, oldest = {}, {}
        for uuid, row in zip(uuids, rows):
            seen = newest.get(uuid)
            if seen is None:
                newest[uuid] = row
                oldest[uuid] = row[1]
            elif row[1] > seen[1]:
                newest[uuid] = row
            elif row[1] < oldest[uuid]:
                oldest[uuid] = row[1]
    by_id = sorted((ids[u], u) for u in newest)
    device_ids = [d for d, _ in by_id]
    marks = [device_ids]
    if by_id:
        marks.extend(map(list, zip(*[newest[u][1:] for _, u in by_id])))
    else:
        marks.extend([] for _ in schema.SAMPLE_COLUMNS[1:])
    marks.append([oldest[u] for _, u in by_id])
    records = binary_records(marks, _MARK_TYPES, record_oid) if record_oid and by_id else None
    if records is not None:
        return [records], device_ids
    return list(map(binary_array, marks, _MARK_TYPES)), device_ids

"""The telemetry store's upkeep and its reads: partitions, rollups, retention, fleet, series.

Periodic tasks (collector/tasks.py) call `create_partitions`, `roll_up` and
`apply_retention`; the API calls `fleet` and `device_series`.

Energy in a rollup bucket: each sample carries the energy of the interval
since the device's previous sample, credited to the sample's bucket. It is the
counter's delta when both samples have a counter and it did not go down; when
the counter went down (driver reload: a new counter) or is missing, it is
power integrated over the interval (trapezoid). Intervals longer than
`schema.MAX_GAP_S` are a gap: no energy and no device time.
"""

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from collector.agent import schema
from collector.models import Device, LatestSample, Node, Rollup1m

log = logging.getLogger(__name__)

GAP = f"interval '{schema.MAX_GAP_S} seconds'"

# Per-interval energy and covered time for the samples of `win`, a set of
# (device_id, lo, hi) windows; the lag reaches back to the one sample before `lo`, within a gap (an index
# lookup: reading the whole gap's samples of every device cost the roll-up more than its minutes did). The
# energy is the widest scope measured: a superchip's module (its counter, else its power) where the device
# reports it, else the device's own (counter, else power); `e_module` says which.
_MODULE_COUNTER = "module_energy_j IS NOT NULL AND prev_me IS NOT NULL AND module_energy_j >= prev_me"
_MODULE_POWER = "module_power_w IS NOT NULL AND prev_mp IS NOT NULL"
_INTERVALS = f"""
pts AS (
    SELECT s.*, win.lo,
        lag(s.ts) OVER w AS prev_ts, lag(s.energy_j) OVER w AS prev_e, lag(s.power_w) OVER w AS prev_p,
        lag(s.module_energy_j) OVER w AS prev_me, lag(s.module_power_w) OVER w AS prev_mp
    FROM win CROSS JOIN LATERAL (
        (SELECT * FROM telemetry_sample b WHERE b.device_id = win.device_id AND b.ts >= win.lo - {GAP}
           AND b.ts < win.lo ORDER BY b.ts DESC LIMIT 1)
        UNION ALL
        SELECT * FROM telemetry_sample i WHERE i.device_id = win.device_id AND i.ts >= win.lo AND i.ts < win.hi
    ) s
    WINDOW w AS (PARTITION BY s.device_id, win.lo ORDER BY s.ts)
),
iv AS (
    SELECT pts.*,
        CASE WHEN prev_ts IS NOT NULL AND ts - prev_ts <= {GAP}
             THEN extract(epoch FROM ts - prev_ts)::float8 ELSE 0 END AS dt_s,
        CASE WHEN prev_ts IS NULL OR ts - prev_ts > {GAP} THEN NULL
             WHEN {_MODULE_COUNTER} THEN module_energy_j - prev_me
             WHEN {_MODULE_POWER} THEN (module_power_w + prev_mp) / 2.0 * extract(epoch FROM ts - prev_ts)::float8
             WHEN energy_j IS NOT NULL AND prev_e IS NOT NULL AND energy_j >= prev_e THEN energy_j - prev_e
             WHEN power_w IS NOT NULL AND prev_p IS NOT NULL
             THEN (power_w + prev_p) / 2.0 * extract(epoch FROM ts - prev_ts)::float8
        END AS e_j,
        CASE WHEN prev_ts IS NULL OR ts - prev_ts > {GAP} THEN false
             WHEN {_MODULE_COUNTER} THEN true
             WHEN {_MODULE_POWER} THEN false
             ELSE energy_j IS NOT NULL AND prev_e IS NOT NULL AND energy_j >= prev_e END AS e_counter,
        ({_MODULE_COUNTER}) OR ({_MODULE_POWER}) AS e_module
    FROM pts WHERE ts >= lo
)
"""

_ENERGY_FROM = """
    CASE WHEN count(e_j) = 0 THEN 'none'
         WHEN bool_and(e_counter) FILTER (WHERE e_j IS NOT NULL) THEN 'counter'
         WHEN NOT bool_or(e_counter) FILTER (WHERE e_j IS NOT NULL) THEN 'power'
         ELSE 'mixed' END
"""

_ROLLUP_COLS = (
    "device_id, bucket, samples, covered_s, util_mean_pct, util_max_pct, sm_active_mean_pct, "
    "mem_used_max_mib, power_mean_w, power_max_w, temp_max_c, energy_j, energy_from, "
    "tensor_active_mean_pct, sm_occupancy_mean_pct, module_power_mean_w, memory_power_mean_w, "
    "nvlink_tx_mean_bytes_s, nvlink_rx_mean_bytes_s, throttled_samples, reasons_samples, energy_scope, "
    + ", ".join(f"{key}_samples" for key, _, _ in schema.REASONS) + ", power_limit_min_w"
)
_MINUTE_REASONS = ", ".join(f"count(*) FILTER (WHERE clock_event_reasons & {bits} <> 0)"
                            for _, _, bits in schema.REASONS)
_HOUR_REASONS = ", ".join(f"sum(r.{key}_samples)" for key, _, _ in schema.REASONS)
_ENERGY_SCOPE = """
    CASE WHEN count(e_j) = 0 THEN 'none'
         WHEN bool_and(e_module) FILTER (WHERE e_j IS NOT NULL) THEN 'module'
         WHEN NOT bool_or(e_module) FILTER (WHERE e_j IS NOT NULL) THEN 'device'
         ELSE 'mixed' END
"""
# A host CPU on a node where a device measures its module (a superchip: GPU, CPU and memory) is in that
# reading already: its own energy is charged as none, so the CPU is not counted twice.
_IN_MODULE = ("d.source = 'host' AND EXISTS (SELECT 1 FROM collector_device g WHERE g.node_id = d.node_id "
              "AND g.power_scopes LIKE '%%module%%')")
# The means of the newer GPUs' figures (schema._ROLLUP_EXTENDED_COLUMNS): over a minute's samples, and over an
# hour's minutes weighted by their samples, as util_mean_pct.
_MEANS = (("tensor_active_pct", "tensor_active_mean_pct"), ("sm_occupancy_pct", "sm_occupancy_mean_pct"),
          ("module_power_w", "module_power_mean_w"), ("memory_power_w", "memory_power_mean_w"),
          ("nvlink_tx_bytes_s", "nvlink_tx_mean_bytes_s"), ("nvlink_rx_bytes_s", "nvlink_rx_mean_bytes_s"))
_MINUTE_MEANS = ", ".join(f"avg({sample})" for sample, _ in _MEANS)
_HOUR_MEANS = ", ".join(f"sum(r.{mean} * r.samples) / nullif(sum(r.samples) FILTER (WHERE r.{mean} IS NOT NULL), 0)"
                        for _, mean in _MEANS)
_UPDATE_ALL = ", ".join(f"{c} = excluded.{c}" for c in _ROLLUP_COLS.split(", ")[2:])
# A bucket recomputed to the figures it has is left alone: no new row version, and its `written_xid`
# (schema.WRITTEN_SQL) still says when it last changed, so attribution does not read it again.
_IF_CHANGED = ("WHERE ({old}) IS DISTINCT FROM ({new})"
               .replace("{old}", ", ".join(f"{{table}}.{c}" for c in _ROLLUP_COLS.split(", ")[2:]))
               .replace("{new}", ", ".join(f"excluded.{c}" for c in _ROLLUP_COLS.split(", ")[2:])))

_ROLLUP_1M = f"""
WITH claim AS (
    SELECT * FROM unnest(%s::int4[], %s::timestamptz[], %s::timestamptz[]) AS c(device_id, hour, from_ts)
),
win AS (
    SELECT device_id, date_trunc('minute', from_ts) AS lo, hour + interval '1 hour' AS hi FROM claim
),
{_INTERVALS}
INSERT INTO telemetry_rollup_1m ({_ROLLUP_COLS})
SELECT iv.device_id, date_trunc('minute', ts), count(*), sum(dt_s),
       avg(util_pct), max(util_pct), avg(sm_active_pct), max(mem_used_mib),
       avg(power_w), max(power_w), max(temp_c),
       CASE WHEN bool_or(in_module) THEN 0 ELSE coalesce(sum(e_j), 0) END, {_ENERGY_FROM},
       {_MINUTE_MEANS},
       count(*) FILTER (WHERE clock_event_reasons & {schema.THROTTLE_MASK} <> 0), count(clock_event_reasons),
       CASE WHEN bool_or(in_module) THEN 'in_module' ELSE {_ENERGY_SCOPE} END,
       {_MINUTE_REASONS}, min(power_limit_w)
FROM iv JOIN (SELECT d.id, {_IN_MODULE} AS in_module FROM collector_device d) dev ON dev.id = iv.device_id
GROUP BY iv.device_id, date_trunc('minute', ts)
ON CONFLICT (device_id, bucket) DO UPDATE SET {_UPDATE_ALL} {_IF_CHANGED.format(table="telemetry_rollup_1m")}
"""

_ROLLUP_1H = f"""
WITH claim AS (
    SELECT * FROM unnest(%s::int4[], %s::timestamptz[]) AS c(device_id, hour)
)
INSERT INTO telemetry_rollup_1h ({_ROLLUP_COLS})
SELECT r.device_id, c.hour, sum(r.samples), sum(r.covered_s),
       sum(r.util_mean_pct * r.samples) / nullif(sum(r.samples) FILTER (WHERE r.util_mean_pct IS NOT NULL), 0),
       max(r.util_max_pct),
       sum(r.sm_active_mean_pct * r.samples)
           / nullif(sum(r.samples) FILTER (WHERE r.sm_active_mean_pct IS NOT NULL), 0),
       max(r.mem_used_max_mib),
       sum(r.power_mean_w * r.samples) / nullif(sum(r.samples) FILTER (WHERE r.power_mean_w IS NOT NULL), 0),
       max(r.power_max_w), max(r.temp_max_c), sum(r.energy_j),
       CASE WHEN count(DISTINCT r.energy_from) FILTER (WHERE r.energy_from <> 'none') = 0 THEN 'none'
            WHEN count(DISTINCT r.energy_from) FILTER (WHERE r.energy_from <> 'none') = 1
            THEN min(r.energy_from) FILTER (WHERE r.energy_from <> 'none')
            ELSE 'mixed' END,
       {_HOUR_MEANS},
       sum(r.throttled_samples), sum(r.reasons_samples),
       CASE WHEN count(DISTINCT r.energy_scope) FILTER (WHERE r.energy_scope <> 'none') = 0 THEN 'none'
            WHEN count(DISTINCT r.energy_scope) FILTER (WHERE r.energy_scope <> 'none') = 1
            THEN min(r.energy_scope) FILTER (WHERE r.energy_scope <> 'none')
            ELSE 'mixed' END,
       {_HOUR_REASONS}, min(r.power_limit_min_w)
FROM claim c JOIN telemetry_rollup_1m r
  ON r.device_id = c.device_id AND r.bucket >= c.hour AND r.bucket < c.hour + interval '1 hour'
GROUP BY r.device_id, c.hour
ON CONFLICT (device_id, bucket) DO UPDATE SET {_UPDATE_ALL} {_IF_CHANGED.format(table="telemetry_rollup_1h")}
"""


def retention():
    """Return (raw days, 1-minute days, 1-hour days or None = kept), as settings read them."""
    return settings.TELEMETRY_RAW_DAYS, settings.TELEMETRY_1M_DAYS, settings.TELEMETRY_1H_DAYS


# -- upkeep -------------------------------------------------------------------


def create_partitions(days_ahead=7, today=None):
    """Create the raw-sample partitions from yesterday to `days_ahead` days ahead; return their names."""
    today = today or schema.today_utc()
    with transaction.atomic(), connection.cursor() as cur:
        return schema.ensure_partitions(
            cur, schema.days_between(today - timedelta(days=1), today + timedelta(days=days_ahead))
        )


# How long the roll-up waits for writers to let it move the watermark. Writers
# that start meanwhile queue behind it, so it must be short; a long write (a
# big import in one transaction) makes it give up until the next run.
WATERMARK_WAIT_MS = 500

_MARK_BETWEEN = """
INSERT INTO telemetry_rollup_pending (device_id, hour, from_ts)
SELECT l.device_id, h.hour, greatest(%(lo)s, h.hour) FROM telemetry_latest l
CROSS JOIN LATERAL generate_series(date_trunc('hour', %(lo)s, 'UTC'), least(l.ts, %(hi)s), interval '1 hour') AS h(hour)
WHERE l.ts >= %(lo)s
ORDER BY 1, 2
ON CONFLICT (device_id, hour) DO UPDATE SET from_ts = excluded.from_ts
WHERE excluded.from_ts < telemetry_rollup_pending.from_ts
"""


def advance_watermark(now=None):
    """Move the roll-up watermark to `now` and mark (device, hour) pending for the samples it passed.

    Writers mark pending only samples older than the watermark. Moving it
    takes the advisory lock writers hold shared, so every writer that read
    the old line has committed; the samples they wrote between the old and
    the new line are then marked here, from `telemetry_latest` (a device has
    samples past the old line only if its newest is). The mark is its own
    transaction and remembers how far it got (`marked_upto`), so a failed
    one is redone by the next run. Return True when the line moved.
    """
    now = now or timezone.now()
    moved = True
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{WATERMARK_WAIT_MS}ms'")
            cur.execute(f"SELECT pg_advisory_xact_lock({schema.WATERMARK_LOCK})")
            cur.execute("UPDATE telemetry_rollup_watermark SET upto = greatest(upto, %s)", [now])
    except OperationalError as err:  # lock_not_available: a long write holds the line; next run
        log.info("roll-up watermark not moved this run (writers busy): %s", err)
        moved = False
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT marked_upto, upto FROM telemetry_rollup_watermark FOR UPDATE")
        lo, hi = cur.fetchone()
        if lo < hi:
            cur.execute(_MARK_BETWEEN, {"lo": lo, "hi": hi})
            cur.execute("UPDATE telemetry_rollup_watermark SET marked_upto = %s", [hi])
    return moved


def roll_up(limit=2000, max_rounds=50, now=None):
    """Recompute the 1-minute and 1-hour rollups of every (device, hour) written since its last roll-up.

    First moves the watermark to `now`, which marks the live samples since the
    last run. Idempotent: a bucket is recomputed whole from the raw samples
    (1m) or the 1m rollups (1h) and upserted. Claims pending rows with SKIP
    LOCKED, so two workers never do the same hour. Return the number of
    (device, hour) pairs done.
    """
    advance_watermark(now)
    done = 0
    for _ in range(max_rounds):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                "SELECT device_id, hour, from_ts FROM telemetry_rollup_pending "
                "ORDER BY hour, device_id LIMIT %s FOR UPDATE SKIP LOCKED",
                [limit],
            )
            claimed = cur.fetchall()
            if not claimed:
                break
            devices = [c[0] for c in claimed]
            hours = [c[1] for c in claimed]
            cur.execute(_ROLLUP_1M, [devices, hours, [c[2] for c in claimed]])
            cur.execute(_ROLLUP_1H, [devices, hours])
            cur.execute(
                "DELETE FROM telemetry_rollup_pending p USING unnest(%s::int4[], %s::timestamptz[]) AS c(device_id, hour) "
                "WHERE p.device_id = c.device_id AND p.hour = c.hour",
                [devices, hours],
            )
        done += len(claimed)
        if len(claimed) < limit:
            break
    return done


def apply_retention(now=None):
    """Drop raw partitions and delete rollups past their retention; return what went.

    A raw day is kept while it still has hours waiting for their roll-up, so
    data imported from long ago reaches the rollups before its raw rows go.
    """
    now = now or timezone.now()
    raw_days, m1_days, h1_days = retention()
    dropped, kept = [], []
    with transaction.atomic(), connection.cursor() as cur:
        cutoff = now.date() - timedelta(days=raw_days)
        for day, name in sorted(schema.existing_partitions(cur).items()):
            if day >= cutoff:
                continue
            cur.execute(
                "SELECT EXISTS (SELECT 1 FROM telemetry_rollup_pending WHERE hour < %s)",
                [day + timedelta(days=1)],
            )
            if cur.fetchone()[0]:
                kept.append(name)
                continue
            cur.execute(f"DROP TABLE {name}")
            dropped.append(name)
        cur.execute("DELETE FROM telemetry_rollup_1m WHERE bucket < %s", [now - timedelta(days=m1_days)])
        deleted_1m = cur.rowcount
        deleted_1h = 0
        if h1_days is not None:
            cur.execute("DELETE FROM telemetry_rollup_1h WHERE bucket < %s", [now - timedelta(days=h1_days)])
            deleted_1h = cur.rowcount
        cur.execute("DELETE FROM telemetry_device_holder WHERE last_seen < %s", [now - timedelta(days=raw_days)])
    return {"dropped_partitions": dropped, "kept_pending": kept, "deleted_1m": deleted_1m, "deleted_1h": deleted_1h}


# -- reads ----------------------------------------------------------------------

LATEST_FIELDS = LatestSample.FIELDS
_NODE_COLUMNS = ("node_id", "node", "labels", "interval_s")
_DEVICE_COLUMNS = ("device_id", "uuid", "index", "model", "source", "simulated", "power_estimated", "mem_total_mib",
                   "arch", "mig_mode", "power_scopes")
_LATEST = f"""
SELECT n.id, n.name, n.labels, n.interval_s, d.id, d.uuid, d.index, d.model, d.source, d.simulated,
       d.power_estimated, d.mem_total_mib, d.arch, d.mig_mode, d.power_scopes,
       {', '.join('l.' + f for f in LATEST_FIELDS)}
FROM collector_node n
LEFT JOIN collector_device d ON d.node_id = n.id
LEFT JOIN telemetry_latest l ON l.device_id = d.id
{{where}}ORDER BY n.name, d.index
"""


def newest_sample_age_s(now=None):
    """Seconds since the newest sample of any device, or None when there is none."""
    with connection.cursor() as cur:
        cur.execute("SELECT max(ts) FROM telemetry_latest")
        newest = cur.fetchone()[0]
    if newest is None:
        return None
    return ((now or timezone.now()) - newest).total_seconds()


def latest_rows(node_ids=None):
    """The one read of the fleet as it is now: every node, each device of it and that device's newest
    sample, in one query (node name, device index order). A dict per device with node_id, node, labels,
    interval_s, device_id, the Device.dict_of fields and "latest" (LatestSample.to_dict, None without a
    sample); a node without devices is one row whose device_id is None. The fleet API and page (`fleet`)
    and the live broadcaster (dashboard.broadcast) all read it; the broadcaster only for the nodes of
    `node_ids` that a node page shows."""
    with connection.cursor() as cur:
        if node_ids is None:
            cur.execute(_LATEST.format(where=""))
        else:
            cur.execute(_LATEST.format(where="WHERE n.id = ANY(%s) "), [list(node_ids)])
        rows = cur.fetchall()
    names = _NODE_COLUMNS + _DEVICE_COLUMNS
    labels = {}  # jsonb comes back as text under Django (its JSONField decodes it): once per node
    out = []
    for values in rows:
        row = dict(zip(names, values))
        ts = values[len(names)]
        row["latest"] = None if ts is None else dict(zip(LATEST_FIELDS, values[len(names):]))
        if row["node_id"] not in labels:
            labels[row["node_id"]] = json.loads(row["labels"]) if isinstance(row["labels"], str) else row["labels"]
        row["labels"] = labels[row["node_id"]]
        out.append(row)
    return out


def fleet(now=None, rows=None):
    """Every node (Node.to_dict) with its status and devices (Device.to_dict), each device with its latest
    sample (or None); from `rows` of latest_rows when given, else read now."""
    now = now or timezone.now()
    rows = latest_rows() if rows is None else rows
    out = []
    for row in rows:
        if not out or out[-1][0].pk != row["node_id"]:
            out.append((Node(id=row["node_id"], name=row["node"], labels=row["labels"], interval_s=row["interval_s"]),
                        [], []))
        if row["device_id"] is not None:
            out[-1][1].append({**Device.dict_of(row), "latest": row["latest"]})
            out[-1][2].append(row["latest"] and row["latest"]["ts"])
    return [node.to_dict(devices, max(filter(None, stamps), default=None), now) for node, devices, stamps in out]


_LAYOUT = """
SELECT n.id, n.name, n.labels, n.interval_s, d.id, d.index, d.model, d.source, d.simulated, d.power_estimated
FROM collector_node n LEFT JOIN collector_device d ON d.node_id = n.id
ORDER BY n.name, d.index
"""


def layout_rows():
    """Every node and its devices in the fleet page's order (node name, device index), as tuples (node id,
    name, labels, interval_s, device id, index, model, source, simulated, power_estimated); a node without
    devices has None for the device's. The live fleet's layout (dashboard.fleetstate)."""
    with connection.cursor() as cur:
        cur.execute(_LAYOUT)
        return cur.fetchall()


def layout_generation():
    """The fleet's layout generation (schema.LAYOUT_SQL): the same while `layout_rows` would answer the same;
    None where that row is missing (then nothing is kept). It is the row's number and the transaction that
    wrote it: a change rolled back after this process read it (its own transaction's, a test's) took a number
    the next committed change takes again, with other devices."""
    with connection.cursor() as cur:
        cur.execute("SELECT generation, xmin::text FROM collector_layout_generation")
        row = cur.fetchone()
        return tuple(row) if row else None


# One device of latest_values' blob: five big-endian 8-byte fields, as PostgreSQL's int8send and float8send write them
# (a numpy dtype; numpy is loaded by the first read, not by every process that imports the store).
LATEST_VALUES_FIELDS = [("device_id", ">i8"), ("ts_us", ">i8"), ("util_pct", ">f8"), ("power_w", ">f8"),
                        ("clock_event_reasons", ">i8")]
# real columns go out as text and back as float8, the value psycopg's text read gives (312.7, not the float4's
# 312.70001220703125), so the frames' figures equal those of the pages that read rows.
_LATEST_VALUES = (
    "SELECT string_agg(int8send(device_id::int8) || int8send((extract(epoch FROM ts) * 1000000)::int8) "
    "|| float8send(coalesce(util_pct::text::float8, 'NaN')) || float8send(coalesce(power_w::text::float8, 'NaN')) "
    "|| int8send(coalesce(clock_event_reasons, 0)::int8), ''::bytea) FROM telemetry_latest")


def latest_values():
    """Each device's newest sample narrowed to what the fleet page draws, in no order: a numpy structured array
    (LATEST_VALUES_FIELDS) with device_id, ts_us (integer microseconds since the epoch), util_pct and power_w
    (NaN: none) and clock_event_reasons (0: none). The live fleet's publisher (dashboard.fleetstate) reads it
    twice a second: a few columns of `telemetry_latest`, no join, packed by PostgreSQL into one bytea that
    numpy reads whole. At 100,000 devices a fetch of Python tuples and their conversion took 160 ms of the web
    process's CPU (under its GIL), a binary COPY (a message a row) 67 ms, this 9 ms (57 ms of wall time)."""
    import numpy as np

    with connection.cursor() as cur:
        cur.execute(_LATEST_VALUES)
        blob = cur.fetchone()[0]
    return np.frombuffer(bytes(blob or b""), dtype=np.dtype(LATEST_VALUES_FIELDS))


def device_facts(device_ids):
    """{device id: {node, owner, model, source, simulated, power_estimated}} of the devices with those ids
    (owner: the node's team label, None without one); the cost ledger prices and labels by them."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT d.id, n.name, nullif(n.labels->>'team', ''), d.model, d.source, d.simulated, d.power_estimated "
            "FROM collector_device d JOIN collector_node n ON n.id = d.node_id WHERE d.id = ANY(%s)",
            [list(device_ids)],
        )
        names = ("node", "owner", "model", "source", "simulated", "power_estimated")
        return {row[0]: dict(zip(names, row[1:])) for row in cur.fetchall()}


def device_ids(uuids):
    """{uuid: device id} of the devices with those UUIDs (unknown ones are absent). One array parameter, not
    an IN list: attribution asks for every held GPU's (75,000 at 100,000 GPUs: 3 s through the ORM's list)."""
    with connection.cursor() as cur:
        cur.execute("SELECT uuid, id FROM collector_device WHERE uuid = ANY(%s::text[])", [list(uuids)])
        return dict(cur.fetchall())


def host_device_ids(node_names):
    """{node name: [ids of its host devices (its CPU, `--source host`)]} of the named nodes."""
    out = {}
    for name, device_id in Device.objects.filter(node__name__in=list(node_names), source="host") \
            .values_list("node__name", "id"):
        out.setdefault(name, []).append(device_id)
    return out


_ROLLUP_MINUTE = ("SELECT r.device_id, r.bucket, r.samples, r.covered_s, r.energy_j, r.energy_from, "
                  "nullif(n.labels->>'team', ''), r.energy_scope FROM {source} "
                  "JOIN collector_device d ON d.id = r.device_id JOIN collector_node n ON n.id = d.node_id")


def rollup_minutes(lo=None, hi=None, pairs=None, devices_from=None):
    """1-minute rollups with lo <= bucket < hi, by device then minute, or those of the (device id, minute)
    `pairs`, or those of the devices of `devices_from` ({device id: minute}) from that device's minute on (and
    in [lo, hi)): [(device_id, bucket, samples, covered_s, energy_j, energy_from, owner, energy_scope)], owner
    being the node's team label (None without one). Cost attribution splits them among the jobs."""
    with connection.cursor() as cur:
        if devices_from is not None:
            cur.execute(_ROLLUP_MINUTE.format(
                source="unnest(%s::int4[], %s::timestamptz[]) AS f(device_id, lo) "
                       "JOIN telemetry_rollup_1m r ON r.device_id = f.device_id AND r.bucket >= f.lo")
                + " WHERE r.bucket >= %s AND r.bucket < %s ORDER BY r.device_id, r.bucket",
                [list(devices_from), list(devices_from.values()), lo, hi])
        elif pairs is None:
            cur.execute(_ROLLUP_MINUTE.format(source="telemetry_rollup_1m r")
                        + " WHERE r.bucket >= %s AND r.bucket < %s ORDER BY r.device_id, r.bucket", [lo, hi])
        else:
            cur.execute(_ROLLUP_MINUTE.format(
                source="unnest(%s::int4[], %s::timestamptz[]) AS p(device_id, bucket) "
                       "JOIN telemetry_rollup_1m r ON r.device_id = p.device_id AND r.bucket = p.bucket"),
                [[p[0] for p in pairs], [p[1] for p in pairs]])
        return cur.fetchall()


_HELD_ACTIVITY = """
SELECT h.device_id, sum(h.held_s),
       sum(r.util_mean_pct * h.held_s) / nullif(sum(h.held_s) FILTER (WHERE r.util_mean_pct IS NOT NULL), 0),
       sum(r.sm_active_mean_pct * h.held_s)
           / nullif(sum(h.held_s) FILTER (WHERE r.sm_active_mean_pct IS NOT NULL), 0),
       sum(r.tensor_active_mean_pct * h.held_s)
           / nullif(sum(h.held_s) FILTER (WHERE r.tensor_active_mean_pct IS NOT NULL), 0),
       sum(r.throttled_samples), sum(r.reasons_samples)
FROM unnest(%s::int8[], %s::timestamptz[], %s::float8[]) AS h(device_id, minute, held_s)
JOIN telemetry_rollup_1m r ON r.device_id = h.device_id AND r.bucket = h.minute
GROUP BY h.device_id
ORDER BY h.device_id
"""


def held_activity(held):
    """What devices did in the minutes someone held them: for `held`, [(device id, minute, seconds held)], a row
    per device of (device id, seconds held, utilization %, SM active %, tensor active %, throttled samples,
    samples that report why), each minute's rollup weighted by the seconds held in it; a minute without a
    rollup counts for nothing, a figure no minute reports is None."""
    with connection.cursor() as cur:
        cur.execute(_HELD_ACTIVITY, [[h[0] for h in held], [h[1] for h in held], [h[2] for h in held]])
        return cur.fetchall()


def rollup_snapshot():
    """The database's pg_snapshot now, as text: which transactions had committed. Later, rollups_written_since
    of it gives the 1-minute rollups written by every other one."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_current_snapshot()::text")
        return cur.fetchone()[0]


# Written by a transaction `snapshot` did not see committed (then running, or begun since), or by this one. The
# first condition is the index's range: every transaction before the snapshot's xmin had ended.
_WRITTEN_SINCE = ("written_xid >= pg_snapshot_xmin(%s::pg_snapshot) AND (NOT pg_visible_in_snapshot(written_xid, "
                  "%s::pg_snapshot) OR written_xid = pg_current_xact_id_if_assigned())")


def rollups_written_since(snapshot, lo, hi):
    """The 1-minute rollups (Rollup1m, a queryset another app may narrow) with lo <= bucket < hi that were
    written (inserted or changed: schema.WRITTEN_SQL) since `snapshot` (rollup_snapshot's text) was taken, or
    in the current transaction. Rows that committed after the snapshot are in it whatever their minute, so a
    reader that takes a snapshot before it reads and asks for what was written since its last one misses none."""
    return Rollup1m.objects.filter(bucket__gte=lo, bucket__lt=hi).filter(
        RawSQL(_WRITTEN_SINCE, [snapshot, snapshot], output_field=BooleanField()))


def rollup_minutes_in(lo, hi):
    """The 1-minute rollups (Rollup1m) with lo <= bucket < hi, as a queryset another app may narrow."""
    return Rollup1m.objects.filter(bucket__gte=lo, bucket__lt=hi)


def oldest_rollup_minute():
    """The first minute any device has a 1-minute rollup for, or None."""
    with connection.cursor() as cur:
        cur.execute("SELECT min(bucket) FROM telemetry_rollup_1m")
        return cur.fetchone()[0]


def fleet_power_kw(start, end):
    """[(bucket, kW)] of the whole fleet with start <= bucket < end: 1-minute rollups up to 6 hours,
    1-hour rollups past that (the fleet page's power chart)."""
    table = "telemetry_rollup_1m" if end - start <= timedelta(hours=6) else "telemetry_rollup_1h"
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT bucket, sum(power_mean_w) / 1000.0 FROM {table} "
            "WHERE bucket >= %s AND bucket < %s GROUP BY bucket ORDER BY bucket",
            [start, end],
        )
        return cur.fetchall()


RESOLUTIONS = ("raw", "1m", "1h")
# The widest range each resolution answers, so one request cannot pull months of raw rows.
MAX_RANGE = {"raw": timedelta(days=1), "1m": timedelta(days=31), "1h": timedelta(days=3 * 366)}

_SERIES_RAW = f"""
WITH win AS (SELECT %s::int4 AS device_id, %s::timestamptz AS lo, %s::timestamptz AS hi),
{_INTERVALS}
SELECT ts, {", ".join(schema.SAMPLE_FIELDS)}, e_j, CASE WHEN e_j IS NULL THEN 'none'
       WHEN e_counter THEN 'counter' ELSE 'power' END
FROM iv ORDER BY ts
"""

_ROLLUP_FIELDS = (
    "samples",
    "covered_s",
    "util_mean_pct",
    "util_max_pct",
    "sm_active_mean_pct",
    "mem_used_max_mib",
    "power_mean_w",
    "power_max_w",
    "temp_max_c",
    "energy_j",
    "energy_from",
    *(mean for _, mean in _MEANS),
    "throttled_samples",
    "reasons_samples",
    "energy_scope",
    *(f"{key}_samples" for key, _, _ in schema.REASONS),
    "power_limit_min_w",
)


def device_series(device, start, end, resolution):
    """Points of `device` with start <= ts < end at `resolution`, each with the energy of its interval.

    Raw points: every sample field, `energy_j` the energy since the previous
    sample (and `energy_counter_j` the counter as reported); rollup points: the
    bucket's aggregates. `energy_from` says how each energy figure was obtained.
    """
    with connection.cursor() as cur:
        if resolution == "raw":
            cur.execute(_SERIES_RAW, [device.id, start, end])
            names = ("ts",) + schema.SAMPLE_FIELDS[:3] + ("energy_counter_j",) + schema.SAMPLE_FIELDS[4:]
            names += ("energy_j", "energy_from")
            return [dict(zip(names, row)) for row in cur.fetchall()]
        table = {"1m": "telemetry_rollup_1m", "1h": "telemetry_rollup_1h"}[resolution]
        cur.execute(
            f"SELECT bucket, {', '.join(_ROLLUP_FIELDS)} FROM {table} "
            "WHERE device_id = %s AND bucket >= %s AND bucket < %s ORDER BY bucket",
            [device.id, start, end],
        )
        return [dict(zip(("ts",) + _ROLLUP_FIELDS, row)) for row in cur.fetchall()]

"""The telemetry schema, in one place.

The Django migrations run `CREATE_SQL` and each later part (`WATERMARK_SQL`,
`LINEAGE_SQL`, ... `LAYOUT_SQL`; `DROP_SQL` reverses them all); tests and the
benchmarks run `SCHEMA_SQL`, all of them together. The agent
uses the same text and the same partition helper, so a node that writes with
plain psycopg and the control plane agree on every column.

Tables:

- `collector_node`, `collector_device`: who reports (registered by the agent,
  with the node's IP addresses where its source reads this machine);
  `collector_layout_generation` (`LAYOUT_SQL`, one row) moves on whenever
  what the fleet page lays out of them changes.
- `telemetry_sample`: raw samples, partitioned by UTC day, primary key
  (device_id, ts). No foreign key to the device: a per-row FK check would cost
  a trigger call on every COPYed row, and devices are never deleted while
  their samples are kept.
- `telemetry_latest`: one row per device, the newest sample, so the fleet view
  never scans history.
- `telemetry_rollup_1m`, `telemetry_rollup_1h`: per device and bucket; each
  1-minute row says which transaction last wrote it (`WRITTEN_SQL`), so
  attribution reads only what changed since its last run.
- `telemetry_rollup_pending`: (device, hour) pairs written since their last
  roll-up; the rollup task claims them, so late and replayed data is rolled up.
- `telemetry_rollup_watermark` (one row, added by `WATERMARK_SQL`): the line
  between old and new samples. A writer marks pending only the samples older
  than `upto`; the roll-up moves `upto` to now once a minute and marks the
  samples between the old and the new line itself, for every device at once
  (see collector/store.py `advance_watermark`). Live samples, always newer
  than the line, so cost a writer no pending marks at all.
- `telemetry_device_holder`: which processes (host PID) or pods hold a device;
  with `LINEAGE_SQL` (migration 0003) each process's ancestor PIDs and launcher
  job ids (agent/lineage.py), to match training runs to the devices they hold.
"""

from datetime import datetime, timedelta, timezone

# Column order of a sample row everywhere: the agent's tuples, the spool, COPY.
SAMPLE_FIELDS = (
    "util_pct",
    "mem_util_pct",
    "power_w",
    "energy_j",
    "mem_used_mib",
    "mem_total_mib",
    "temp_c",
    "sm_clock_mhz",
    "sm_active_pct",
    # Added by collector migration 0004 (EXTENDED_SQL): what newer GPUs report beside the above.
    "module_power_w",  # the whole module (GPU + CPU + memory of a superchip), NVML power scope MODULE
    "memory_power_w",  # NVML power scope MEMORY
    "module_energy_j",  # the module's cumulative energy counter, as reported
    "tensor_active_pct",  # share of time any tensor core was busy (GPM ANY_TENSOR_UTIL)
    "sm_occupancy_pct",  # active warps against the SMs' maximum (GPM SM_OCCUPANCY)
    "nvlink_tx_bytes_s",  # NVLink data sent per second since the previous tick, all links
    "nvlink_rx_bytes_s",
    "clock_event_reasons",  # why clocks are held down now: NVML's clocks event reasons bitmask
    "power_limit_w",  # the enforced power limit
)
# Postgres types of ("device_id", "ts") + SAMPLE_FIELDS, for binary COPY.
SAMPLE_COPY_TYPES = (
    "int4",
    "timestamptz",
    "float4",
    "float4",
    "float4",
    "float8",
    "int4",
    "int4",
    "float4",
    "int4",
    "float4",
    "float4",
    "float4",
    "float8",
    "float4",
    "float4",
    "float8",
    "float8",
    "int8",
    "float4",
)
SAMPLE_COLUMNS = ("device_id", "ts") + SAMPLE_FIELDS

# Intervals longer than this between two samples of one device are a gap:
# neither device time nor energy is counted across them.
MAX_GAP_S = 300

_EXTENDED_COLUMNS = (
    ("module_power_w", "real"),
    ("memory_power_w", "real"),
    ("module_energy_j", "double precision"),
    ("tensor_active_pct", "real"),
    ("sm_occupancy_pct", "real"),
    ("nvlink_tx_bytes_s", "double precision"),
    ("nvlink_rx_bytes_s", "double precision"),
    ("clock_event_reasons", "bigint"),
    ("power_limit_w", "real"),
)
_EXTENDED_DDL = ",\n    ".join(f"{name} {kind}" for name, kind in _EXTENDED_COLUMNS)

_FIELDS_DDL = f"""
    util_pct real,
    mem_util_pct real,
    power_w real,
    energy_j double precision,
    mem_used_mib integer,
    mem_total_mib integer,
    temp_c real,
    sm_clock_mhz integer,
    sm_active_pct real,
    {_EXTENDED_DDL}
"""

# NVML's clocks event reasons that slow a busy GPU down, in the groups a person asks about: (key, name, bits).
# SW power cap 0x4 and HW power brake 0x80; SW thermal 0x20 and HW thermal 0x40; sync boost 0x10 (held to the
# slowest GPU of its group); HW slowdown 0x8 (NVML sets it with either HW reason, and on its own for other
# hardware causes). GPU idle 0x1, application clocks 0x2 and display clocks 0x100 do not slow work down.
REASONS = (
    ("power_cap", "power cap", 0x04 | 0x80),
    ("thermal", "thermal", 0x20 | 0x40),
    ("sync_boost", "sync boost", 0x10),
    ("hw_slowdown", "HW slowdown", 0x08),
)

# Any of REASONS.
THROTTLE_MASK = sum(bits for _, _, bits in REASONS)  # the groups share no bit
# Added by collector migration 0006 (REASONS_SQL): the samples held down by each group of REASONS, and the
# lowest power limit enforced in the bucket.
_REASON_COLUMNS = (*((f"{key}_samples", "integer NOT NULL DEFAULT 0") for key, _, _ in REASONS),
                   ("power_limit_min_w", "real"))

# Added by collector migration 0004 (EXTENDED_SQL). throttled_samples: samples whose clocks were held down by
# power, heat, sync boost or a hardware slowdown (THROTTLE_MASK), not by idling or application clocks.
_ROLLUP_EXTENDED_COLUMNS = (
    ("tensor_active_mean_pct", "real"),
    ("sm_occupancy_mean_pct", "real"),
    ("module_power_mean_w", "real"),
    ("memory_power_mean_w", "real"),
    ("nvlink_tx_mean_bytes_s", "double precision"),
    ("nvlink_rx_mean_bytes_s", "double precision"),
    ("throttled_samples", "integer NOT NULL DEFAULT 0"),
    ("reasons_samples", "integer NOT NULL DEFAULT 0"),
    # Whose energy energy_j is (collector/store.py): 'device' (the GPU's or CPU's own reading), 'module' (a
    # superchip's whole module: GPU, CPU, memory), 'mixed', 'none', or 'in_module' (a host CPU whose energy a
    # module reading on its node already holds: charged none, so it is not counted twice).
    ("energy_scope", "text NOT NULL DEFAULT 'device'"),
    *_REASON_COLUMNS,
)
_ROLLUP_EXTENDED_DDL = ",\n    ".join(f"{name} {kind}" for name, kind in _ROLLUP_EXTENDED_COLUMNS)

_ROLLUP_DDL = f"""
    device_id integer NOT NULL,
    bucket timestamptz NOT NULL,
    samples integer NOT NULL,
    covered_s double precision NOT NULL,
    util_mean_pct real,
    util_max_pct real,
    sm_active_mean_pct real,
    mem_used_max_mib integer,
    power_mean_w real,
    power_max_w real,
    temp_max_c real,
    energy_j double precision NOT NULL,
    energy_from text NOT NULL CHECK (energy_from IN ('counter', 'power', 'mixed', 'none')),
    {_ROLLUP_EXTENDED_DDL},
    PRIMARY KEY (device_id, bucket)
"""

CREATE_SQL = f"""
CREATE TABLE collector_node (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    labels jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    interval_s double precision NOT NULL DEFAULT 1,
    first_seen timestamptz NOT NULL DEFAULT now(),
    registered_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE collector_device (
    id serial PRIMARY KEY,
    uuid text NOT NULL UNIQUE,
    node_id bigint NOT NULL REFERENCES collector_node (id) ON DELETE CASCADE,
    index integer NOT NULL,
    model text NOT NULL DEFAULT '',
    source text NOT NULL,
    simulated boolean NOT NULL DEFAULT false,
    power_estimated boolean NOT NULL DEFAULT false,
    mem_total_mib integer,
    first_seen timestamptz NOT NULL DEFAULT now(),
    registered_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX collector_device_node ON collector_device (node_id);

CREATE TABLE telemetry_sample (
    device_id integer NOT NULL,
    ts timestamptz NOT NULL,
    {_FIELDS_DDL},
    PRIMARY KEY (device_id, ts)
) PARTITION BY RANGE (ts);

-- Rewritten every tick: half-empty pages let those updates stay HOT (no index work).
CREATE TABLE telemetry_latest (
    device_id integer PRIMARY KEY REFERENCES collector_device (id) ON DELETE CASCADE,
    ts timestamptz NOT NULL,
    {_FIELDS_DDL}
) WITH (fillfactor = 50);

CREATE TABLE telemetry_rollup_1m ({_ROLLUP_DDL});
CREATE INDEX telemetry_rollup_1m_bucket ON telemetry_rollup_1m (bucket) INCLUDE (power_mean_w);
CREATE TABLE telemetry_rollup_1h ({_ROLLUP_DDL});
CREATE INDEX telemetry_rollup_1h_bucket ON telemetry_rollup_1h (bucket) INCLUDE (power_mean_w);

CREATE TABLE telemetry_rollup_pending (
    device_id integer NOT NULL,
    hour timestamptz NOT NULL,
    from_ts timestamptz NOT NULL,
    PRIMARY KEY (device_id, hour)
);

CREATE TABLE telemetry_device_holder (
    device_id integer NOT NULL REFERENCES collector_device (id) ON DELETE CASCADE,
    holder text NOT NULL,
    pid integer,
    used_mem_mib integer,
    first_seen timestamptz NOT NULL,
    last_seen timestamptz NOT NULL,
    PRIMARY KEY (device_id, holder)
);
"""

# Added after the first schema (collector migration 0002). `upto`: writers mark
# (device, hour) pending for samples older than this. `marked_upto`: the
# roll-up has marked every device's samples older than this; it trails `upto`
# only between the two transactions of one advance, or after one that failed.
WATERMARK_SQL = f"""
CREATE TABLE telemetry_rollup_watermark (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    upto timestamptz NOT NULL,
    marked_upto timestamptz NOT NULL
);
INSERT INTO telemetry_rollup_watermark VALUES (true, now(), now());
-- The writer's statement after the COPY gets each device's newest sample and
-- its oldest ts in the batch as one binary array of these (one set to unnest).
CREATE TYPE telemetry_mark AS (
    device_id integer,
    ts timestamptz,
    {_FIELDS_DDL},
    lo timestamptz
);
"""
WATERMARK_DROP_SQL = "DROP TYPE IF EXISTS telemetry_mark; DROP TABLE IF EXISTS telemetry_rollup_watermark;"

# Writers hold it shared (pg_advisory_xact_lock_shared) from before they read
# the watermark to their commit; the roll-up takes it exclusively to move the
# watermark, so it knows that every writer that saw the old line has committed.
WATERMARK_LOCK = 0x7961_7264_776D  # "yardwm"
# Every write that stores samples NOTIFYs this channel at its commit: the live fleet's publisher LISTENs
# and reads the fleet at once rather than at its next poll (dashboard.broadcast).
WRITES_CHANNEL = "yardstick_samples"

# Added by collector migration 0003: where each holder process comes from
# (agent/lineage.py). `ancestor_pids`: parent first. `launcher_ids`: e.g.
# {"SLURM_JOB_ID": "4242"}, indexed for "the holders of this launcher's job".
LINEAGE_SQL = """
ALTER TABLE telemetry_device_holder
    ADD COLUMN ancestor_pids integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN launcher_ids jsonb NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX telemetry_device_holder_launcher ON telemetry_device_holder USING gin (launcher_ids jsonb_path_ops);
"""
LINEAGE_DROP_SQL = """
DROP INDEX IF EXISTS telemetry_device_holder_launcher;
ALTER TABLE telemetry_device_holder DROP COLUMN IF EXISTS ancestor_pids, DROP COLUMN IF EXISTS launcher_ids;
"""

# Added by collector migration 0004: what newer GPUs report (module and memory power, module energy, tensor
# activity, SM occupancy, NVLink throughput, clock event reasons, power limit) on samples and rollups, and each
# device's architecture, MIG mode and power scopes. IF NOT EXISTS: a database made by 0001 from this file's
# current text has the columns already. The writer's row type is made again with the new columns before `lo`.
def _add_columns(table, columns):
    return f"ALTER TABLE {table} " + ", ".join(f"ADD COLUMN IF NOT EXISTS {n} {k}" for n, k in columns) + ";"


EXTENDED_SQL = "\n".join([
    _add_columns("telemetry_sample", _EXTENDED_COLUMNS),
    _add_columns("telemetry_latest", _EXTENDED_COLUMNS),
    _add_columns("telemetry_rollup_1m", _ROLLUP_EXTENDED_COLUMNS),
    _add_columns("telemetry_rollup_1h", _ROLLUP_EXTENDED_COLUMNS),
    _add_columns("collector_device", (("arch", "text NOT NULL DEFAULT ''"), ("mig_mode", "boolean"),
                                      ("power_scopes", "text NOT NULL DEFAULT ''"))),
    "DROP TYPE IF EXISTS telemetry_mark;",
    f"CREATE TYPE telemetry_mark AS (device_id integer, ts timestamptz, {_FIELDS_DDL}, lo timestamptz);",
])

# Going back from 0004: the columns stay (older code never reads them); the row type loses them again, as the
# older writer builds it.
_BASE_FIELDS_DDL = _FIELDS_DDL.split(",\n    module_power_w")[0]
EXTENDED_DROP_SQL = ("DROP TYPE IF EXISTS telemetry_mark; "
                     f"CREATE TYPE telemetry_mark AS (device_id integer, ts timestamptz, {_BASE_FIELDS_DDL}, lo timestamptz);")

# Added by collector migration 0005: what a device reported about its health (agent/sources/nvml.py): an XID
# error, uncorrected ECC errors, a row remapping pending or failed. `critical`: the device needs a reset or a
# drain, and counts as unhealthy for a while (collector.models.DeviceEvent). The key makes a replayed spool
# store each event once.
HEALTH_SQL = """
CREATE TABLE IF NOT EXISTS telemetry_device_event (
    device_id integer NOT NULL REFERENCES collector_device (id) ON DELETE CASCADE,
    ts timestamptz NOT NULL,
    kind text NOT NULL,
    code bigint NOT NULL DEFAULT 0,
    detail text NOT NULL DEFAULT '',
    critical boolean NOT NULL DEFAULT false,
    PRIMARY KEY (device_id, ts, kind, code)
);
CREATE INDEX IF NOT EXISTS telemetry_device_event_ts ON telemetry_device_event (ts);
"""
HEALTH_DROP_SQL = "DROP TABLE IF EXISTS telemetry_device_event;"

# Collector migration 0006: each group of REASONS counted apart in the rollups, and the power limit.
REASONS_SQL = "\n".join(_add_columns(t, _REASON_COLUMNS) for t in ("telemetry_rollup_1m", "telemetry_rollup_1h"))

# Collector migration 0007: which transaction last wrote each 1-minute rollup (`written_xid`), so a reader that
# follows the rollups (cost attribution) reads only those written since it last looked, whatever their minute,
# instead of every device's recent minutes: rows not visible in the pg_snapshot it took then
# (collector/store.py `rollups_written_since`). The default stamps an insert, the trigger any update, so every
# writer is seen (the roll-up, an import, a hand fix). Rows from before 0007 keep NULL: never written since.
WRITTEN_SQL = """
ALTER TABLE telemetry_rollup_1m ADD COLUMN IF NOT EXISTS written_xid xid8;
ALTER TABLE telemetry_rollup_1m ALTER COLUMN written_xid SET DEFAULT pg_current_xact_id();
CREATE OR REPLACE FUNCTION telemetry_rollup_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.written_xid := pg_current_xact_id();
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS telemetry_rollup_1m_written ON telemetry_rollup_1m;
CREATE TRIGGER telemetry_rollup_1m_written BEFORE UPDATE ON telemetry_rollup_1m
    FOR EACH ROW EXECUTE FUNCTION telemetry_rollup_written();
CREATE INDEX IF NOT EXISTS telemetry_rollup_1m_written ON telemetry_rollup_1m (written_xid)
    WHERE written_xid IS NOT NULL;
"""
WRITTEN_DROP_SQL = """
DROP INDEX IF EXISTS telemetry_rollup_1m_written;
DROP TRIGGER IF EXISTS telemetry_rollup_1m_written ON telemetry_rollup_1m;
DROP FUNCTION IF EXISTS telemetry_rollup_written();
ALTER TABLE telemetry_rollup_1m DROP COLUMN IF EXISTS written_xid;
"""

# The fleet's layout generation: one row whose number every change to what the fleet page lays out moves on
# (a node's name, labels or interval; a device's node, index, model, source or flags; rows added, removed or
# truncated), so a reader that keeps the layout (dashboard.fleetstate) checks one row instead of reading the
# fleet. A row, not a sequence: the number changes when the change commits, never before its rows are seen.
# An UPDATE naming those columns moves it even when their values stay (an agent's registration): rare.
LAYOUT_SQL = """
CREATE TABLE IF NOT EXISTS collector_layout_generation (
    id int PRIMARY KEY CHECK (id = 1),
    generation bigint NOT NULL
);
INSERT INTO collector_layout_generation VALUES (1, 1) ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION collector_layout_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO collector_layout_generation VALUES (1, 1)
        ON CONFLICT (id) DO UPDATE SET generation = collector_layout_generation.generation + 1;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS collector_node_layout ON collector_node;
CREATE TRIGGER collector_node_layout AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF name, labels, interval_s
    ON collector_node FOR EACH STATEMENT EXECUTE FUNCTION collector_layout_changed();
DROP TRIGGER IF EXISTS collector_device_layout ON collector_device;
CREATE TRIGGER collector_device_layout AFTER INSERT OR DELETE OR TRUNCATE
    OR UPDATE OF id, node_id, index, model, source, simulated, power_estimated
    ON collector_device FOR EACH STATEMENT EXECUTE FUNCTION collector_layout_changed();
"""
LAYOUT_DROP_SQL = """
DROP TRIGGER IF EXISTS collector_node_layout ON collector_node;
DROP TRIGGER IF EXISTS collector_device_layout ON collector_device;
DROP FUNCTION IF EXISTS collector_layout_changed();
DROP TABLE IF EXISTS collector_layout_generation;
"""

# Collector migration 0009: the IP addresses of each node's machine, as its agent reports them (a source that reads
# this machine: nvml, host), so a node a scheduler names by address (Ray's are named by IP) is tied to the agent's
# node of another name (launch.remote.tie). Empty where no agent reported any.
ADDRESSES_SQL = _add_columns("collector_node", (("addresses", "text[] NOT NULL DEFAULT '{}'"),))
ADDRESSES_DROP_SQL = "ALTER TABLE collector_node DROP COLUMN IF EXISTS addresses;"

# The whole schema, for a database made without Django's migrations (tests, benchmarks).
SCHEMA_SQL = (CREATE_SQL + WATERMARK_SQL + LINEAGE_SQL + EXTENDED_SQL + HEALTH_SQL + REASONS_SQL + WRITTEN_SQL
              + LAYOUT_SQL + ADDRESSES_SQL)

DROP_SQL = """
DROP TABLE IF EXISTS telemetry_device_event;
DROP FUNCTION IF EXISTS telemetry_rollup_written() CASCADE;
DROP FUNCTION IF EXISTS collector_layout_changed() CASCADE;
DROP TABLE IF EXISTS collector_layout_generation;
DROP TYPE IF EXISTS telemetry_mark;
DROP TABLE IF EXISTS telemetry_rollup_watermark, telemetry_device_holder, telemetry_rollup_pending,
    telemetry_rollup_1h, telemetry_rollup_1m, telemetry_latest, telemetry_sample,
    collector_device, collector_node CASCADE;
"""

PARTITION_PREFIX = "telemetry_sample_p"


def partition_name(day):
    return f"{PARTITION_PREFIX}{day:%Y%m%d}"


def partition_day(name):
    """Return the date a partition named by `partition_name` holds, or None."""
    if not name.startswith(PARTITION_PREFIX):
        return None
    try:
        return datetime.strptime(name[len(PARTITION_PREFIX):], "%Y%m%d").date()
    except ValueError:
        return None


def partition_sql(day):
    nxt = day + timedelta(days=1)
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF telemetry_sample "
        f"FOR VALUES FROM ('{day.isoformat()} 00:00:00+00') TO ('{nxt.isoformat()} 00:00:00+00')"
    )


def days_between(first, last):
    """Every UTC date from `first` to `last` (dates or aware datetimes), inclusive."""
    if isinstance(first, datetime):
        first = first.astimezone(timezone.utc).date()
    if isinstance(last, datetime):
        last = last.astimezone(timezone.utc).date()
    day = first
    while day <= last:
        yield day
        day += timedelta(days=1)


def ensure_partitions(cursor, days):
    """Create the daily partitions for `days` (dates) that do not exist yet.

    `cursor` is any DB-API cursor (psycopg or Django's). Takes a transaction-level
    advisory lock so two agents creating the same day do not race on the catalog.
    Return the names of the partitions created.
    """
    days = sorted(set(days))
    if not days:
        return []
    cursor.execute("SELECT pg_advisory_xact_lock(hashtext('telemetry_sample partitions'))")
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'telemetry_sample'::regclass"
    )
    existing = {row[0] for row in cursor.fetchall()}
    created = []
    for day in days:
        if partition_name(day) not in existing:
            cursor.execute(partition_sql(day))
            created.append(partition_name(day))
    return created


def existing_partitions(cursor):
    """Return {date: partition name} for the daily partitions of telemetry_sample."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'telemetry_sample'::regclass"
    )
    found = {}
    for (name,) in cursor.fetchall():
        day = partition_day(name)
        if day is not None:
            found[day] = name
    return found


def today_utc():
    return datetime.now(timezone.utc).date()


"""Upkeep at fleet scale: roll-up, attribution and the latest-row updates per 60 s period, against the period.

    python bench/upkeep.py [--devices 100000] [--hz 0.1] [--minutes 20] [--periods 5] [--late 0.01]
                           [--late-minutes-ago 15]
                           [--data-dir var/bench-upkeep] [--resume]

Everything runs against an embedded PostgreSQL and Redis of its own under
--data-dir (its database re-created each run; DATABASE_URL and REDIS_URL are
ignored). It fills the database server-side (INSERT ... SELECT of generated
rows, not the agent: bench/ingest.py measures that path) with --devices GPUs,
8 a node, each sampled at --hz, for --minutes of history, 3/4 of the GPUs held
by running jobs of 64 GPUs (as bench/load.py's `prepare`), rolls the history
up and attributes it with the real tasks' code, then runs --periods periods of
60 s on a simulated clock. Each period writes the period's samples tick by
tick (one sample per device every 1/--hz seconds, each device at its own
phase), updating `telemetry_latest` as the agent's writer does (an UPDATE
that only moves a row forward), plus a late sample of --late of the devices
--late-minutes-ago back, in a minute already attributed (a replayed spool: marked pending as the
writer marks it); then it times what beat runs every 60 s:

- `collector.tasks.roll_up`: collector.store.roll_up (advance_watermark, then
  the 1-minute and 1-hour rollups of every (device, hour) pending);
- `costs.tasks.attribute`: costs.attribution.attribute, check_budgets and
  publish_figures, as the task runs them, on the simulated clock.

Prints, per part, the median and the slowest of the periods in seconds, their
ratio to the 60 s period (goal <= 0.5 for both tasks) and to the same run's
reference: reading the period's new samples (device, ts, power) back; for the
tasks also the CPU seconds this process and its PostgreSQL backend used (what
a task takes alone on a machine that others share), and each period's load
average. --resume goes on from the database an earlier run left (its fill and
first roll-up take most of an hour on two busy cores). Never fails on speed.
"""

import argparse
import functools
import os
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import load  # noqa: E402

PERIOD_S = 60.0  # beat's period for collector-roll-up and costs-attribute
GPUS_PER_NODE = 8
JOB_GPUS = 64
HELD_SHARE = 0.75
MARK = "upkeep"  # the data dir's folder that says a run of this benchmark made it
START = datetime(2030, 1, 1, tzinfo=timezone.utc)  # the simulated day starts here (the cost report's "today")

# A sample of device d at ts: an H100-like reading with the newer GPUs' fields (collector/agent/schema.py); the
# energy counter grows with the power. Columns in schema.SAMPLE_COLUMNS order.
_SAMPLE = """
SELECT d.id, t.ts,
       (50 + 40 * sin(extract(epoch FROM t.ts) / 300 + d.id))::real,
       30::real,
       (400 + 250 * sin(extract(epoch FROM t.ts) / 300 + d.id))::real,
       1e9 + d.id * 1e3 + extract(epoch FROM t.ts - %(start)s::timestamptz) * 400,
       40000 + d.id %% 1000, 81559, (45 + d.id %% 30)::real, 1980,
       (40 + 30 * sin(extract(epoch FROM t.ts) / 300 + d.id))::real,
       NULL, NULL, NULL, 20::real, 35::real, 2.5e10, 2.4e10,
       CASE WHEN d.id %% 50 = 0 THEN 4 ELSE 0 END, 700::real
"""


def fresh_database():
    """bench/load.py's fresh database (dropped, made again, migrated), with the simulated day's partitions."""
    from django.db import connection

    from collector.agent import schema

    load.fresh_database()
    with connection.cursor() as cur:
        schema.ensure_partitions(cur, schema.days_between(START - timedelta(days=1), START + timedelta(days=1)))


def make_fleet(devices, interval_s):
    """`devices` H100s, 8 a node (nodes of four teams), written server-side."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("INSERT INTO collector_node (name, labels, interval_s) "
                    "SELECT 'bench-node-' || lpad(n::text, 5, '0'), jsonb_build_object('team', 'team' || n %% 4), %s "
                    "FROM generate_series(0, %s) n", [interval_s, (devices - 1) // GPUS_PER_NODE])
        cur.execute("INSERT INTO collector_device (uuid, node_id, index, model, source, arch) "
                    "SELECT 'GPU-bench-' || g, n.id, g %% 8, 'NVIDIA H100 80GB HBM3', 'nvml', 'hopper' "
                    "FROM generate_series(0, %s) g JOIN collector_node n "
                    "ON n.name = 'bench-node-' || lpad((g / 8)::text, 5, '0') ORDER BY g", [devices - 1])


def hold(name, started_at):
    """Running jobs of JOB_GPUS holding HELD_SHARE of the devices from `started_at` (their stints); return how many."""
    from django.db import connection

    from trainer.models import Job, Status, Stint

    with connection.cursor() as cur:
        cur.execute("SELECT d.uuid, n.name FROM collector_device d JOIN collector_node n ON n.id = d.node_id "
                    "ORDER BY d.id")
        gpus = cur.fetchall()
    held = gpus[: int(len(gpus) * HELD_SHARE) // JOB_GPUS * JOB_GPUS]
    stints = []
    for k in range(0, len(held), JOB_GPUS):
        job = Job.objects.create(name=f"{name} {k // JOB_GPUS}", team=f"team{k // JOB_GPUS % 4}", env="arithmetic",
                                 config={}, status=Status.RUNNING, started_at=started_at)
        stints += [Stint(job=job, node=node, device=uuid, device_name="NVIDIA H100 80GB HBM3", pid=1,
                         started_at=started_at) for uuid, node in held[k:k + JOB_GPUS]]
    Stint.objects.bulk_create(stints, batch_size=5000)
    return len(held) // JOB_GPUS


def fill(devices, hz, minutes):
    """Nodes, devices, --minutes of samples, the latest rows, the running jobs; the watermark at START.
    Return (the end of the history, running jobs)."""
    from django.db import connection

    step = 1.0 / hz
    end = START + timedelta(minutes=minutes)
    make_fleet(devices, step)
    with connection.cursor() as cur:
        cur.execute("UPDATE telemetry_rollup_watermark SET upto = %s, marked_upto = %s", [START, START])
        _write_samples(cur, START, end, step)
        cur.execute("INSERT INTO telemetry_latest SELECT DISTINCT ON (device_id) * FROM telemetry_sample "
                    "ORDER BY device_id, ts DESC")
    jobs = hold("upkeep", START)
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    return end, jobs


def _write_samples(cur, lo, hi, step):
    """Every device's samples with lo <= ts < hi, one each `step` seconds at the device's own phase."""
    cur.execute(
        "INSERT INTO telemetry_sample " + _SAMPLE
        + "FROM collector_device d CROSS JOIN LATERAL generate_series("
        "%(lo)s::timestamptz + (d.id %% %(phases)s) * interval '1 second', "
        "%(hi)s::timestamptz - interval '1 microsecond', %(step)s * interval '1 second') AS t(ts) "
        "ORDER BY d.id, t.ts",
        {"start": START, "lo": lo, "hi": hi, "step": step, "phases": max(1, int(step))})


def write_tick(cur, lo, hi, step):
    """One tick's samples (lo <= ts < hi) through a staging table, then the latest rows as the agent's writer
    updates them (collector/agent/writer.py, `moved`); return the seconds of that update."""
    from collector.agent import writer

    cur.execute("DROP TABLE IF EXISTS bench_tick")
    cur.execute("CREATE TEMP TABLE bench_tick (LIKE telemetry_sample)")
    cur.execute(
        "INSERT INTO bench_tick " + _SAMPLE
        + "FROM collector_device d CROSS JOIN LATERAL (SELECT %(lo)s::timestamptz "
        "+ (d.id %% %(phases)s) * interval '1 second' AS ts) t WHERE t.ts < %(hi)s ORDER BY d.id",
        {"start": START, "lo": lo, "hi": hi, "step": step, "phases": max(1, int(step))})
    cur.execute("INSERT INTO telemetry_sample SELECT * FROM bench_tick")
    began = time.perf_counter()
    cur.execute(f"UPDATE telemetry_latest l SET {writer._SET_LATEST} FROM bench_tick v "  # the writer's own SET
                "WHERE l.device_id = v.device_id AND l.ts < v.ts")
    return time.perf_counter() - began


def write_late(cur, share, minute):
    """A late sample of `share` of the devices, 7 s into `minute` (already attributed), marked pending as the
    writer marks samples older than the watermark."""
    cur.execute(
        "WITH late AS (INSERT INTO telemetry_sample " + _SAMPLE
        + "FROM collector_device d CROSS JOIN LATERAL (SELECT %(minute)s::timestamptz + interval '7.5 seconds' AS ts) t "
        "WHERE d.id %% %(every)s = 0 ORDER BY d.id ON CONFLICT DO NOTHING RETURNING device_id, ts) "
        "INSERT INTO telemetry_rollup_pending (device_id, hour, from_ts) "
        "SELECT device_id, date_trunc('hour', ts, 'UTC'), ts FROM late "
        "ON CONFLICT (device_id, hour) DO UPDATE SET from_ts = least(excluded.from_ts, telemetry_rollup_pending.from_ts)",
        {"start": START, "minute": minute, "every": max(1, round(1 / share))})
    return cur.rowcount


def attribute_task(now):
    """costs.tasks.attribute's body on the simulated clock (the task itself reads the wall clock)."""
    from costs.attribution import attribute
    from costs.budget import check_budgets
    from costs.live import publish_figures

    summary = attribute(now=now)
    summary["budget_stops"] = check_budgets()
    publish_figures(summary, now=now)
    return summary


def cpu_s():
    """CPU seconds used so far by this process and by its PostgreSQL backend (the same machine's /proc): on a
    machine others share, what a part would take alone, where wall time says what it took among them."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return time.process_time() + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn, cpu=None):
    """(wall seconds, result) of fn(); with `cpu` (a list), its CPU seconds (cpu_s) appended to it."""
    began, used = time.perf_counter(), cpu_s() if cpu is not None else 0.0
    result = fn()
    wall = time.perf_counter() - began
    if cpu is not None:
        cpu.append(cpu_s() - used)
    return wall, result


def run(args):
    from django.db import connection, transaction

    from collector import store

    step = 1.0 / args.hz
    began = time.perf_counter()
    end = resumed(args) if args.resume else None
    if end is None:
        fresh_database()
        end, jobs = fill(args.devices, args.hz, args.minutes)
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM telemetry_sample")
            samples = cur.fetchone()[0]
        print(f"{args.devices:,} GPUs at {args.hz:g} Hz, {jobs} running jobs of {JOB_GPUS} GPUs; {args.minutes} min "
              f"of history = {samples:,} samples ({time.perf_counter() - began:.0f} s)", flush=True)
        first_roll_s, pairs = timed(lambda: store.roll_up(now=end, max_rounds=10 ** 6))
        first_attr_s, summary = timed(lambda: attribute_task(end + timedelta(seconds=1)))
        print(f"history rolled up in {first_roll_s:.1f} s ({pairs:,} device-hours), attributed in "
              f"{first_attr_s:.1f} s ({summary['rows']:,} allocation rows)", flush=True)
        with connection.cursor() as cur:
            cur.execute("CREATE TABLE bench_upkeep (devices int, hz float8)")
            cur.execute("INSERT INTO bench_upkeep VALUES (%s, %s)", [args.devices, args.hz])
    else:
        print(f"resumed at {end:%H:%M:%S} of the simulated day, the database of an earlier run "
              f"({args.devices:,} GPUs at {args.hz:g} Hz)", flush=True)

    figures = {"roll_up": [], "attribute": [], "latest": [], "reference": []}
    cpu = {"roll_up": [], "attribute": []}
    now = end
    for period in range(args.periods):
        lo, now = now, now + timedelta(seconds=PERIOD_S)
        latest_s = 0.0
        with connection.cursor() as cur:
            tick = lo
            while tick < now:
                with transaction.atomic():
                    latest_s += write_tick(cur, tick, min(now, tick + timedelta(seconds=step)), step)
                tick += timedelta(seconds=step)
            late_minute = store_minute(lo) - timedelta(minutes=args.late_minutes_ago)
            late = write_late(cur, args.late, late_minute) if args.late else 0
            ref_s, read = timed(functools.partial(_read_back, cur, lo, now))
        roll_s, pairs = timed(functools.partial(store.roll_up, now=now), cpu["roll_up"])
        attr_s, summary = timed(functools.partial(attribute_task, now + timedelta(seconds=1)), cpu["attribute"])
        for name, value in (("roll_up", roll_s), ("attribute", attr_s), ("latest", latest_s), ("reference", ref_s)):
            figures[name].append(value)
        print(f"period {period + 1}: {read:,} samples (+{late:,} late); latest rows {latest_s:.2f} s, roll_up "
              f"{roll_s:.1f} s, {cpu['roll_up'][-1]:.1f} s CPU ({pairs:,} device-hours), attribute {attr_s:.1f} s, "
              f"{cpu['attribute'][-1]:.1f} s CPU ({summary['rows']:,} rows, {summary['late_minutes']:,} late "
              f"minutes); load average {os.getloadavg()[0]:.1f}", flush=True)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_size_pretty(pg_database_size(current_database())), current_setting('server_version')")
        size, version = cur.fetchone()
    ref = statistics.median(figures["reference"])
    print(f"\nPostgreSQL {version}, database {size}; {args.devices:,} GPUs at {args.hz:g} Hz = "
          f"{args.devices * args.hz:,.0f} samples/s; median (slowest) of {args.periods} periods of {PERIOD_S:.0f} s")
    print(f"reference: read the period's samples back     {ref:6.2f} s")
    for name, label in (("roll_up", "collector.tasks.roll_up"), ("attribute", "costs.tasks.attribute"),
                        ("latest", "telemetry_latest updates")):
        med, worst = statistics.median(figures[name]), max(figures[name])
        print(f"{label:<26} {med:6.2f} s ({worst:6.2f})  = {med / PERIOD_S:.3f} ({worst / PERIOD_S:.3f}) x its period, "
              f"{med / ref:.1f}x the reference" + ("  (goal <= 0.5)" if name != "latest" else ""))
        if name in cpu:
            used = statistics.median(cpu[name])
            print(f"{'':<26} {used:6.2f} s CPU ({max(cpu[name]):6.2f}) = {used / PERIOD_S:.3f} "
                  f"({max(cpu[name]) / PERIOD_S:.3f}) x its period: this process and its PostgreSQL backend")


def resumed(args):
    """With --resume: where an earlier run with the same --devices and --hz left the simulated clock (the tick
    after its newest sample), or None when there is no such run to go on from."""
    from django.db import connection

    with connection.cursor() as cur:
        try:
            cur.execute("SELECT devices, hz FROM bench_upkeep")
        except Exception:  # noqa: BLE001 - no table (or no database): nothing to resume
            connection.close()
            return None
        if cur.fetchone() != (args.devices, args.hz):
            return None
        cur.execute("SELECT max(ts) FROM telemetry_latest")
        newest = cur.fetchone()[0]
    step = timedelta(seconds=1.0 / args.hz)
    return START + ((newest - START) // step + 1) * step  # a tick an interrupted run left half done stays so


def store_minute(ts):
    return ts.replace(second=0, microsecond=0)


def _read_back(cur, lo, hi):
    cur.execute("SELECT count(*), sum(power_w) FROM (SELECT device_id, ts, power_w FROM telemetry_sample "
                "WHERE ts >= %s AND ts < %s) s", [lo, hi])
    return cur.fetchone()[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--hz", type=float, default=0.1, help="samples per second of each device")
    parser.add_argument("--minutes", type=int, default=20, help="minutes of history before the measured periods")
    parser.add_argument("--periods", type=int, default=5)
    parser.add_argument("--late", type=float, default=0.01, help="share of the devices with a late sample a period")
    parser.add_argument("--late-minutes-ago", type=int, default=15, help="how far back the late samples land")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the database an earlier run left (same --devices and --hz), not a new one")
    parser.add_argument("--data-dir", default=str(ROOT / "var" / "bench-upkeep"))
    args = parser.parse_args(argv)
    with load.own_servers(args.data_dir, MARK):
        run(args)


if __name__ == "__main__":
    main()

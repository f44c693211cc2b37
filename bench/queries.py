"""Query times over a big raw history: the fleet, one device's day, fleet power per minute.

    python bench/queries.py [--dsn DSN] [--gpus 1000] [--seconds 10000] [--repeat 20]

Default is the issue's 10 million raw samples (1,000 GPUs x 10,000 s); make it
smaller with --seconds. Fills a scratch database server-side, rolls it up with
the real rollup SQL, then prints the median of each query (goal <= 20 ms), and
the same-run reference: the latest-per-device by DISTINCT ON over raw samples.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psycopg  # noqa: E402
from ingest import fresh_database, server_dsn  # noqa: E402

from collector.agent import schema  # noqa: E402

END = datetime(2030, 1, 2, tzinfo=timezone.utc)

QUERIES = {
    "latest sample of every device": (
        "SELECT d.uuid, d.simulated, d.power_estimated, l.* FROM telemetry_latest l "
        "JOIN collector_device d ON d.id = l.device_id",
        lambda dev: [],
    ),
    "one device, 24 h at 1-minute resolution": (
        "SELECT bucket, util_mean_pct, power_mean_w, energy_j FROM telemetry_rollup_1m "
        "WHERE device_id = %s AND bucket >= %s AND bucket < %s ORDER BY bucket",
        lambda dev: [dev, END - timedelta(hours=24), END],
    ),
    "fleet power per minute, last hour": (
        "SELECT bucket, sum(power_mean_w) FROM telemetry_rollup_1m "
        "WHERE bucket >= %s AND bucket < %s GROUP BY bucket ORDER BY bucket",
        lambda dev: [END - timedelta(hours=1), END],
    ),
}
REFERENCE = (
    "latest per device by DISTINCT ON over raw samples (reference)",
    "SELECT DISTINCT ON (device_id) * FROM telemetry_sample ORDER BY device_id, ts DESC",
)


def fill(conn, gpus, seconds):
    start = END - timedelta(seconds=seconds)
    conn.execute("INSERT INTO collector_node (name) SELECT 'bench-node-' || n FROM generate_series(0, %s) n",
                 [(gpus - 1) // 8])
    conn.execute(
        "INSERT INTO collector_device (uuid, node_id, index, model, source, simulated) "
        "SELECT 'SIM-bench-' || g, (SELECT id FROM collector_node WHERE name = 'bench-node-' || (g / 8)), g %% 8, "
        "'Sim Rubin-class (placeholder)', 'sim', true FROM generate_series(0, %s) g",
        [gpus - 1],
    )
    schema.ensure_partitions(conn.cursor(), schema.days_between(start, END))
    conn.execute(
        "INSERT INTO telemetry_sample SELECT d.id, %s + s * interval '1 second', "
        "(s + d.id) %% 100, 40, 200 + (s + d.id) %% 1000, 1e6 + s * 600.0, 1000, 294912, 60, 2000, 50 "
        "FROM collector_device d, generate_series(0, %s) s ORDER BY d.id, s",
        [start, seconds - 1],
    )
    conn.execute("INSERT INTO telemetry_latest SELECT DISTINCT ON (device_id) * FROM telemetry_sample "
                 "ORDER BY device_id, ts DESC")
    conn.execute("INSERT INTO telemetry_rollup_pending SELECT d.id, h, greatest(h, %s) FROM collector_device d, "
                 "generate_series(date_trunc('hour', %s::timestamptz), %s, interval '1 hour') h",
                 [start, start, END - timedelta(seconds=1)])


def roll_up(conn):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
    import django

    django.setup()
    from collector.store import _ROLLUP_1H, _ROLLUP_1M  # the real SQL the periodic task runs

    claimed = conn.execute("SELECT device_id, hour, from_ts FROM telemetry_rollup_pending").fetchall()
    devices, hours, froms = ([c[i] for c in claimed] for i in range(3))
    conn.execute(_ROLLUP_1M, [devices, hours, froms])
    conn.execute(_ROLLUP_1H, [devices, hours])
    conn.execute("DELETE FROM telemetry_rollup_pending")


def median_ms(conn, sql, params, repeat):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        conn.execute(sql, params).fetchall()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    with server_dsn(args.dsn) as admin:
        dsn = fresh_database(admin)
        with psycopg.connect(dsn, autocommit=True) as conn:
            t = time.perf_counter()
            fill(conn, args.gpus, args.seconds)
            fill_s = time.perf_counter() - t
            t = time.perf_counter()
            roll_up(conn)
            rollup_s = time.perf_counter() - t
            conn.execute("VACUUM ANALYZE")
            rows = conn.execute("SELECT count(*) FROM telemetry_sample").fetchone()[0]
            device = conn.execute("SELECT min(id) FROM collector_device").fetchone()[0]
            print(f"{rows:,} raw samples ({args.gpus} GPUs x {args.seconds} s): filled in {fill_s:.0f} s, "
                  f"rolled up (1m + 1h, real SQL) in {rollup_s:.1f} s")
            for name, (sql, params) in QUERIES.items():
                print(f"  {name:<45} {median_ms(conn, sql, params(device), args.repeat):8.2f} ms median")
            ref_ms = median_ms(conn, REFERENCE[1], [], 1)
            print(f"  {REFERENCE[0]:<45} {ref_ms:8.0f} ms (one run)")
    print("goal: each of the first three <= 20 ms median")


if __name__ == "__main__":
    main()

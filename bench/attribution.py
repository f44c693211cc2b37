"""Cost attribution: minutes attributed per second, against reading the same rollups, same run.

    python bench/attribution.py [--devices 200] [--minutes 360] [--jobs 50]

Starts the embedded services of the settings (YARDSTICK_DATA_DIR, default
var/bench), creates a throwaway test database, fills it with 1-minute rollups
for --devices GPUs over --minutes minutes and --jobs stints, then times:
a first full attribution, an incremental re-run (the periodic task's steady
state), and the cost report grouped by job. The reference is fetching the
same rollup rows into Python. Prints figures; never fails on speed.
"""

import argparse
import os
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
os.environ.setdefault("YARDSTICK_DATA_DIR", str(ROOT / "var" / "bench"))


def fill(devices, minutes, jobs, start):
    from django.db import connection

    from trainer.models import Job, Stint

    with connection.cursor() as cur:
        cur.execute("INSERT INTO collector_node (name, labels) VALUES ('bench', '{\"team\": \"infra\"}') RETURNING id")
        node = cur.fetchone()[0]
        cur.execute("INSERT INTO collector_device (uuid, node_id, index, model, source) "
                    "SELECT 'GPU-bench-' || i, %s, i, 'NVIDIA H100 80GB HBM3', 'nvml' FROM generate_series(0, %s) i",
                    [node, devices - 1])
        cur.execute(
            "INSERT INTO telemetry_rollup_1m (device_id, bucket, samples, covered_s, energy_j, energy_from) "
            "SELECT d.id, %s + m * interval '1 minute', 60, 60, 300 * 60 + random() * 1000, 'counter' "
            "FROM collector_device d, generate_series(0, %s) m", [start, minutes - 1])
    rng = random.Random(0)
    for k in range(jobs):
        job = Job.objects.create(name=f"bench {k}", team=f"team{k % 5}", env="arithmetic", config={})
        begin = start + timedelta(seconds=rng.uniform(0, minutes * 60 * 0.8))
        Stint.objects.create(job=job, node="bench", device=f"GPU-bench-{rng.randrange(devices)}", pid=1,
                             started_at=begin, ended_at=begin + timedelta(seconds=rng.uniform(60, minutes * 30)))


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--minutes", type=int, default=360)
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args(argv)

    import django

    django.setup()
    from django.db import connection

    from yardstick.services import embedded_services_for_command

    with embedded_services_for_command():
        old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            from costs.attribution import attribute
            from costs.report import Period, build

            start = datetime(2025, 1, 1, tzinfo=timezone.utc)
            end = start + timedelta(minutes=args.minutes)
            fill(args.devices, args.minutes, args.jobs, start)
            n = args.devices * args.minutes

            def read():
                with connection.cursor() as cur:
                    cur.execute("SELECT device_id, bucket, samples, covered_s, energy_j, energy_from "
                                "FROM telemetry_rollup_1m")
                    return len(cur.fetchall())

            ref_s, _ = timed(read)
            full_s, summary = timed(lambda: attribute(now=end))
            again_s, _ = timed(lambda: attribute(now=end + timedelta(minutes=1)))
            report_s, report = timed(lambda: build(Period(start, end), "job"))
            print(f"{args.devices} devices x {args.minutes} minutes = {n} device-minutes, {args.jobs} stints")
            print(f"reference: read the rollups        {ref_s:7.3f} s  ({n / ref_s:,.0f} minutes/s)")
            print(f"first attribution (all minutes)    {full_s:7.3f} s  ({n / full_s:,.0f} minutes/s, "
                  f"{full_s / ref_s:.1f}x the read; {summary['rows']} rows)")
            print(f"incremental re-run (steady state)  {again_s:7.3f} s  (a minute later, no rollup new or "
                  "changed: what a run costs beyond its new minutes)")
            print(f"report by job over the period      {report_s:7.3f} s  ({len(report.rows)} rows, "
                  f"fleet ${report.totals['fleet_usd']})")
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()

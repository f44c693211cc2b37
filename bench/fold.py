"""The fold beside attribution: how long its batches hold their locks, and what it costs the attribution it runs beside.

    python bench/fold.py [--devices 2000] [--days 2] [--periods 8] [--batch 20000] [--data-dir var/bench-fold]

Against an embedded PostgreSQL and Redis of its own under --data-dir (its database re-created each run). It makes
--devices GPUs, 8 a node, 3/4 held by running jobs of 64 GPUs, and --days of their allocation minutes past the
horizon (written server-side, a row per device-minute and job or idle, the day sums kept by the triggers as
attribution's writes keep them). Then, on a simulated clock, --periods minutes of what beat runs every 60 s: a
minute of 1-minute rollups for every device, and `costs.attribution.attribute` charging it (the real code: it
deletes and writes allocation rows and the day sums the fold's rows also belong to). The first half of the
periods runs alone (the reference); in the second half the fold runs in a thread of its own, batch after batch
(`costs.fold.fold_batch`, each its own transaction), as fast as it can: far harder than beat's minute of batches
every five.

Prints attribution's wall time per period alone and beside the fold (median, slowest, and their ratio), each
fold batch's time (what its locks are held for: median, 99th percentile, slowest), the rows it folds a second,
and what that makes of a day of 100,000 GPUs (144 M minutes) at beat's duty (a minute in five). Checks that
the days' sums are what they were before the fold, to the digit. Ingest writes other tables (telemetry_*):
the fold takes no lock there. Never fails on speed.
"""

import argparse
import statistics
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import load  # noqa: E402
import upkeep  # noqa: E402

START = datetime(2030, 6, 1, tzinfo=timezone.utc)  # the simulated clock starts here
MARK = "fold"  # the data dir's folder that says a run of this benchmark made it
DAY_MINUTES_100K = 100_000 * 1440
DUTY = 60 / 300  # beat's fold: a minute of batches every five

# A minute of allocations for every device: the held ones charged to their job (held 60 s), the rest idle.
_ALLOCATIONS = """
INSERT INTO costs_allocation (device_id, minute, job_id, team, held_s, device_s, energy_j, energy_from, energy_scope,
                              rollup_samples, rollup_covered_s, rollup_energy_j)
SELECT d.id, m.minute, s.job_id, coalesce(j.team, 'unassigned'), CASE WHEN s.job_id IS NULL THEN 0 ELSE 60 END,
       60, 24000 + d.id %% 1000, 'counter', 'device', 6, 60, 24000 + d.id %% 1000
FROM collector_device d
CROSS JOIN generate_series(%s::timestamptz, %s::timestamptz - interval '1 minute', interval '1 minute') m(minute)
LEFT JOIN trainer_stint s ON s.device = d.uuid
LEFT JOIN trainer_job j ON j.id = s.job_id
"""
_ROLLUPS = """
INSERT INTO telemetry_rollup_1m (device_id, bucket, samples, covered_s, energy_j, energy_from, power_mean_w,
                                 energy_scope, throttled_samples, reasons_samples, power_cap_samples, thermal_samples,
                                 sync_boost_samples, hw_slowdown_samples)
SELECT id, %s, 6, 60, 24000 + id %% 1000, 'counter', 400, 'device', 0, 0, 0, 0, 0, 0 FROM collector_device
"""
_DAYS = "SELECT device_id, day, job_id, team, minutes, device_s, energy_j FROM costs_usage_day ORDER BY 1, 2, 3, 4"


def fill(devices, days, horizon_days):
    """Nodes, devices, jobs and their stints, and `days` of allocation minutes ending `horizon_days` before START;
    attribution's state at START. Return the allocation rows written."""
    from django.db import connection

    from collector import store
    from costs.models import AttributionState
    from trainer.models import Stint

    first = START - timedelta(days=horizon_days + days)
    upkeep.make_fleet(devices, 10)
    upkeep.hold("fold", first)
    rows = 0
    with connection.cursor() as cur:
        for d in range(days):  # a day a statement: the triggers sum each statement's rows
            day = first + timedelta(days=d)
            cur.execute(_ALLOCATIONS, [day, day + timedelta(days=1)])
            rows += cur.rowcount
        cur.execute("VACUUM ANALYZE")
    # As a run at START would leave it: its stints seen, so the next run charges only the new minute.
    AttributionState.objects.update_or_create(id=1, defaults={
        "done_through": START, "rollups_seen": store.rollup_snapshot(),
        "last_stint_id": max(s.pk for s in Stint.objects.only("pk")),
        "open_stints": list(Stint.objects.values_list("pk", flat=True))})
    return rows


def period(minute):
    """One beat period at `minute`: its rollups, then attribution charging them; return attribution's seconds."""
    from django.db import connection

    from costs.attribution import attribute

    with connection.cursor() as cur:
        cur.execute(_ROLLUPS, [minute])
    began = time.perf_counter()
    attribute(now=minute + timedelta(minutes=1))
    return time.perf_counter() - began


def fold_thread(now, batch, batches, stop):
    """Fold batch after batch until nothing is left or `stop` is set; each batch's (seconds, rows) to `batches`."""
    from django.db import connection

    from costs.fold import fold

    try:
        fold(now, batch, budget_s=float("inf"), stop=stop, each=lambda _, seconds, rows: batches.append((seconds, rows)))
    finally:
        connection.close()


def run(args):
    from django.conf import settings
    from django.db import connection

    load.fresh_database()
    began = time.perf_counter()
    rows = fill(args.devices, args.days, settings.ALLOCATION_1M_DAYS)
    print(f"{args.devices:,} GPUs, {rows:,} allocation minutes over {args.days} days past the horizon "
          f"({time.perf_counter() - began:.0f} s)")
    with connection.cursor() as cur:
        cur.execute(_DAYS)
        days_before = cur.fetchall()
    alone, beside = [], []
    half = args.periods // 2
    for k in range(half):
        alone.append(period(START + timedelta(minutes=k)))
    batches, stop = [], threading.Event()
    folding = threading.Thread(target=fold_thread, args=(START, args.batch, batches, stop))
    fold_began = time.perf_counter()
    folding.start()
    k = half
    while k < args.periods or (folding.is_alive() and k < args.periods * 20):
        took = period(START + timedelta(minutes=k))
        if folding.is_alive():
            beside.append(took)
        k += 1
    stop.set()
    folding.join()
    fold_s = sum(s for s, _ in batches)
    folded = sum(n for _, n in batches)
    with connection.cursor() as cur:
        cur.execute(_DAYS)
        days_after = [r for r in cur.fetchall() if r[1] < START.date()]
        cur.execute("SELECT count(*) FROM costs_allocation WHERE minute < %s",
                    [START - timedelta(days=settings.ALLOCATION_1M_DAYS)])
        left = cur.fetchone()[0]
    report(args, alone, beside, batches, folded, fold_s, time.perf_counter() - fold_began, left,
           days_after == [r for r in days_before if r[1] < START.date()])


def report(args, alone, beside, batches, folded, fold_s, wall_s, left, same):
    def ms(values, q):
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000 if len(values) > 1 else values[0] * 1000

    times = [s for s, _ in batches]
    rate = folded / fold_s if fold_s else 0.0
    print(f"attribution, one minute of {args.devices:,} GPUs (its reference: the same alone, this run)")
    print(f"  alone          median {statistics.median(alone):.3f} s, slowest {max(alone):.3f} s ({len(alone)} periods)")
    if beside:
        print(f"  beside a fold  median {statistics.median(beside):.3f} s, slowest {max(beside):.3f} s "
              f"({len(beside)} periods) = {statistics.median(beside) / statistics.median(alone):.2f} x alone "
              f"(slowest {max(beside) / max(alone):.2f} x)")
    else:
        print("  beside a fold  - (the fold ended before a period ran beside it: raise --days)")
    print(f"fold, batches of {args.batch:,} rows, back to back in a thread of its own")
    print(f"  {len(batches)} batches, {folded:,} minutes in {wall_s:.1f} s ({fold_s:.1f} s in batches): "
          f"{rate:,.0f} minutes/s; {left:,} left")
    if times:
        print(f"  a batch (its locks held)  median {statistics.median(times) * 1000:.0f} ms, p99 {ms(times, 99):.0f} ms, "
              f"slowest {max(times) * 1000:.0f} ms")
    if rate:
        day_s = DAY_MINUTES_100K / rate
        print(f"  a day of 100,000 GPUs ({DAY_MINUTES_100K / 1e6:.0f} M minutes): {day_s / 60:.0f} min of batches, "
              f"{day_s / DUTY / 3600:.1f} h at beat's minute in five = {day_s / DUTY / 86400:.2f} x a day")
    print(f"the days' sums after the fold: {'the same, to the digit' if same else 'CHANGED'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--days", type=int, default=2, help="days of allocation minutes past the horizon")
    parser.add_argument("--periods", type=int, default=8, help="minutes of attribution; the second half beside the fold")
    parser.add_argument("--batch", type=int, default=20_000, help="rows a fold batch deletes (costs.fold.BATCH_ROWS)")
    parser.add_argument("--data-dir", default=str(ROOT / "var" / "bench-fold"))
    args = parser.parse_args(argv)
    with load.own_servers(args.data_dir, MARK):
        run(args)


if __name__ == "__main__":
    main()

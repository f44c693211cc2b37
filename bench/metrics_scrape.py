"""Server time of a Prometheus scrape (GET /metrics) of 1,000 devices and 1,000 jobs.

    python bench/metrics_scrape.py [--devices 1000] [--jobs 1000] [--rounds 30] [--fresh]

Works in its own database `bench_metrics` on the embedded PostgreSQL under
YARDSTICK_DATA_DIR (default var/bench-metrics), filled once and reused by a
later run with the same sizes (--fresh rebuilds): nodes of 8 simulated GPUs
with a fresh newest sample and an energy counter each, and jobs that each held
a GPU for 30 of the last 60 minutes (charged by attribution rows), with 10 steps
and three evals; a quarter of them running, the rest ended within the day, so
every job is exported. A scrape is a request through Django's full middleware
stack with the scrape token, by the test client, no network.

Prints p50 and p99 of the scrapes against the goal (200 ms) and against two
references measured in the same run: the fleet's JSON (/api/fleet, the same
device rows) and the bare SQL read of those rows (collector.store.latest_rows).
The teams' spend today is kept a minute in the cache (exporter.metrics): the
first scrape after it expires computes it, printed apart. Never fails on speed.
"""

import argparse
import os
import statistics
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
os.environ.setdefault("YARDSTICK_DATA_DIR", str(ROOT / "var" / "bench-metrics"))
# The scrape token the benchmark sends (settings read it at start-up).
SCRAPE_TOKEN = os.environ.setdefault("YARDSTICK_METRICS_TOKEN", "bench-scrape-token-" + "x" * 12)

from bench.pages import timed, use_bench_database  # noqa: E402

BENCH_DB = "bench_metrics"
GOAL_MS = 200


def fill(devices, jobs):
    """Nodes of 8 simulated GPUs with fresh newest samples; `jobs` jobs each charged 30 minutes of one GPU."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection

    from costs.prices import install_examples

    now = datetime.now(timezone.utc).replace(microsecond=0)
    hour_ago = now.replace(second=0) - timedelta(minutes=60)
    print(f"filling: {devices} devices, {jobs} jobs", flush=True)
    with connection.cursor() as cur:
        cur.execute("TRUNCATE telemetry_sample, telemetry_latest, telemetry_rollup_1m, telemetry_rollup_1h, "
                    "telemetry_rollup_pending, collector_device, collector_node RESTART IDENTITY CASCADE")
        cur.execute("TRUNCATE trainer_job, trainer_step, trainer_sample, trainer_stint, trainer_statuschange, "
                    "costs_allocation RESTART IDENTITY CASCADE")
        cur.execute(
            "INSERT INTO collector_node (name, labels, interval_s, first_seen, registered_at) "
            "SELECT 'sim-' || lpad(n::text, 4, '0'), jsonb_build_object('team', 'team-' || (n %% 5)), 1, %s, %s "
            "FROM generate_series(0, %s - 1) n", [now, now, (devices + 7) // 8])
        cur.execute(
            "INSERT INTO collector_device (uuid, node_id, index, model, source, simulated, power_estimated, "
            "mem_total_mib, first_seen, registered_at) "
            "SELECT 'GPU-sim-' || d, 1 + d / 8, d %% 8, 'NVIDIA H100 80GB HBM3 (sim)', 'sim', true, false, 81559, %s, %s "
            "FROM generate_series(0, %s - 1) d", [now, now, devices])
        cur.execute(
            "INSERT INTO telemetry_latest (device_id, ts, util_pct, mem_util_pct, power_w, energy_j, mem_used_mib, "
            "mem_total_mib, temp_c, sm_clock_mhz, sm_active_pct) "
            "SELECT d, %s, (d * 7) %% 100, 30, 200 + d %% 400, 1e9 + d * 1000.0, 20000, 81559, 55, 1800, 40 "
            "FROM generate_series(1, %s) d", [now, devices])
        cur.execute(
            "INSERT INTO trainer_job (name, team, env, config, device, status, error, stop_requested, "
            "budget_stop_requested, stop_reason, phase, not_resumable_reason, created_at, started_at, finished_at, "
            "steps_done, baseline_pass1, latest_pass1, latest_reward_mean, source, framework, devices, node, pool, "
            "placed_on, stop_loss, stop_loss_outcome) "
            "SELECT 'bench-' || j, 'team-' || (j %% 5), 'arithmetic', '{\"steps\": 10}', 'auto', "
            "CASE WHEN j %% 4 = 0 THEN 'running' ELSE 'completed' END, '', false, false, '', '', '', %s, %s, "
            "CASE WHEN j %% 4 = 0 THEN NULL ELSE %s::timestamptz END, 10, 30, 30 + j %% 7, 0.5, 'embedded', '', 1, "
            "'', '', '', '{}', '{}' FROM generate_series(1, %s) j", [hour_ago, hour_ago, now, jobs])
        cur.execute(
            "INSERT INTO trainer_step (job_id, step, at, metrics, reward_mean, eval_pass1, gen_tokens, step_s) "
            "SELECT j, s, %s + make_interval(mins => s * 3), '{}', 0.5, "
            "CASE WHEN s %% 5 = 0 THEN 30 + s * (j %% 7) / 10.0 END, 4000, 2.0 "
            "FROM generate_series(1, %s) j, generate_series(0, 10) s", [hour_ago, jobs])
        # Each job held GPU (job mod devices) for the first 30 of the last 60 minutes; idle for the rest.
        cur.execute(
            "INSERT INTO costs_allocation (device_id, minute, job_id, team, held_s, device_s, energy_j, energy_from, "
            "rollup_samples, rollup_covered_s, rollup_energy_j, energy_scope) "
            "SELECT 1 + (j - 1) %% %s, %s + make_interval(mins => m), CASE WHEN m < 30 THEN j END, "
            "'team-' || (j %% 5), 60, 60, 24000, 'counter', 60, 60, 24000, 'device' "
            "FROM generate_series(1, %s) j, generate_series(0, 59) m", [devices, hour_ago, jobs])
    install_examples()
    user = get_user_model().objects.get_or_create(username="bench")[0]
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--fresh", action="store_true", help="rebuild the data even when the sizes match")
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.utils import timezone as djtz

    from collector import store
    from costs.live import fleet_today_key
    from exporter.metrics import cache_keys
    from yardstick.services import embedded_services_for_command

    with embedded_services_for_command():  # Redis too: the cache the spend figures are kept in
        use_bench_database(BENCH_DB, args.fresh)
        with connection.cursor() as cur:
            cur.execute("SELECT (SELECT count(*) FROM collector_device), (SELECT count(*) FROM trainer_job)")
            have = cur.fetchone()
        if args.fresh or have != (args.devices, args.jobs):
            fill(args.devices, args.jobs)
        else:
            print(f"reusing {BENCH_DB}: {have[0]} devices, {have[1]} jobs")
        with connection.cursor() as cur:  # fresh again: devices not stale, ended jobs within the day
            cur.execute("UPDATE telemetry_latest SET ts = %s", [djtz.now()])
            cur.execute("UPDATE trainer_job SET finished_at = %s WHERE finished_at IS NOT NULL", [djtz.now()])

        from django.contrib.auth import get_user_model

        scraper = Client(HTTP_AUTHORIZATION=f"Bearer {SCRAPE_TOKEN}")
        viewer = Client()
        viewer.force_login(get_user_model().objects.get(username="bench"))

        def get(client, path):
            resp = client.get(path)
            assert resp.status_code == 200, (path, resp.status_code, resp.content[:200])
            return resp

        def empty_cache():
            today = djtz.now().date()
            cache.delete_many([fleet_today_key(today), *cache_keys(today).values()])

        empty_cache()
        cold = timed(lambda: get(scraper, "/metrics"), 1)[0]  # first request: spend computed, buffers cold
        empty_cache()
        uncached = timed(lambda: get(scraper, "/metrics"), 1)[0]  # warm otherwise: the spend computed
        results = {
            "latest_rows (SQL)": timed(store.latest_rows, args.rounds),
            "/api/fleet": timed(lambda: get(viewer, "/api/fleet"), args.rounds),
            "/metrics": timed(lambda: get(scraper, "/metrics"), args.rounds),
        }
        body = get(scraper, "/metrics").content
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))

    def pct(values, q):
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    print(f"\nserver time over {args.rounds} requests each; {args.devices} devices, {args.jobs} jobs, "
          f"{series:,} series, {len(body) / 1024:.0f} KiB")
    for name, values in results.items():
        print(f"  {name:<20} p50 {statistics.median(values):8.2f} ms   p99 {pct(values, 0.99):8.2f} ms")
    p50, p99 = statistics.median(results["/metrics"]), pct(results["/metrics"], 0.99)
    print(f"  first scrape (cold caches) {cold:.0f} ms; spend not cached {uncached:.0f} ms")
    print(f"/metrics: p50 {p50:.1f} ms, p99 {p99:.1f} ms = {p99 / GOAL_MS:.2f} x goal ({GOAL_MS} ms); "
          f"p50 {p50 / statistics.median(results['/api/fleet']):.1f} x /api/fleet, "
          f"{p50 / statistics.median(results['latest_rows (SQL)']):.1f} x the SQL read of the device rows")


if __name__ == "__main__":
    main()

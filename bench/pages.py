"""Server time of the fleet page (1,000 simulated devices, 10M samples) and the job page (2,000 steps).

    python bench/pages.py [--samples 10000000] [--devices 1000] [--steps 2000] [--rounds 15] [--fresh]

Works in its own database `bench_pages` on the settings' server (the embedded
PostgreSQL under YARDSTICK_DATA_DIR, default var/bench via `make bench`),
migrated and filled once; a later run with the same sizes reuses it (--fresh
rebuilds). Server time is a request through Django's full middleware stack by
the test client, no network. Prints medians and their ratio to the goals
(fleet <= 100 ms, job <= 150 ms) and to references measured in the same run: a
bare `SELECT 1` round trip and the smallest authenticated view (/api/whoami).

The fleet page's "Fleet IPD today" card reads today's totals from the cache,
where the attribute task leaves them every minute (costs/live.py); only with
an empty cache does the page compute them (every allocation of the day). Both
cold reads are printed: with the cache emptied, and right after the task ran
(the task's own time beside them). Never fails on speed.
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
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
os.environ.setdefault("YARDSTICK_DATA_DIR", str(ROOT / "var" / "bench"))

BENCH_DB = "bench_pages"
FLEET_GOAL_MS = 100
JOB_GOAL_MS = 150


def use_bench_database(name, fresh):
    """Point Django at database `name` on the configured server, creating and migrating it as needed."""
    from django.conf import settings
    from django.db import connection

    settings.DATABASES["default"]["TEST"] = {"NAME": name, "CHARSET": None, "TEMPLATE": None, "COLLATION": None, "MIGRATE": True, "MIRROR": None}
    connection.settings_dict["TEST"] = settings.DATABASES["default"]["TEST"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=not fresh)


def timed(fn, rounds):
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def fill(devices, samples, steps):
    """Nodes of 8 simulated GPUs with fresh latest samples, `samples` raw rows, 6 h of rollups, one long job."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection, transaction

    from collector.agent import schema
    from costs.prices import install_examples
    from trainer.models import Job, Sample, Step, Stint

    now = datetime.now(timezone.utc).replace(microsecond=0)
    per_device = max(1, samples // devices)
    first = now - timedelta(seconds=per_device)
    print(f"filling: {devices} devices, {per_device * devices:,} samples ({per_device} s each), {steps} steps", flush=True)
    with connection.cursor() as cur:
        cur.execute(f"TRUNCATE {', '.join(['telemetry_sample', 'telemetry_latest', 'telemetry_rollup_1m', 'telemetry_rollup_1h', 'telemetry_rollup_pending', 'collector_device', 'collector_node'])} RESTART IDENTITY CASCADE")
        cur.execute("TRUNCATE trainer_job, trainer_step, trainer_sample, trainer_stint, trainer_statuschange, costs_allocation RESTART IDENTITY CASCADE")
        cur.execute(
            "INSERT INTO collector_node (name, labels, interval_s) "
            "SELECT 'sim-' || lpad(n::text, 4, '0'), jsonb_build_object('team', 'team-' || (n %% 5)), 1 "
            "FROM generate_series(0, %s - 1) n", [(devices + 7) // 8])
        cur.execute(
            "INSERT INTO collector_device (uuid, node_id, index, model, source, simulated, mem_total_mib) "
            "SELECT 'GPU-sim-' || d, 1 + d / 8, d %% 8, 'NVIDIA H100 80GB HBM3 (sim)', 'sim', true, 81559 "
            "FROM generate_series(0, %s - 1) d", [devices])
        schema.ensure_partitions(cur, schema.days_between(first.date(), now.date()))
        started = time.perf_counter()
        chunk = max(1, 2_000_000 // per_device)
        for lo in range(1, devices + 1, chunk):
            hi = min(devices, lo + chunk - 1)
            cur.execute(
                "INSERT INTO telemetry_sample (device_id, ts, util_pct, mem_util_pct, power_w, energy_j, mem_used_mib, "
                "mem_total_mib, temp_c, sm_clock_mhz, sm_active_pct) "
                "SELECT d, %s + make_interval(secs => s), (d * 7 + s) %% 100, 30, 200 + (d + s) %% 400, s * 400.0, "
                "20000, 81559, 55, 1800, 40 FROM generate_series(%s, %s) d, generate_series(1, %s) s",
                [first, lo, hi, per_device])
            print(f"  samples for devices {lo}..{hi} ({time.perf_counter() - started:.0f} s)", flush=True)
        cur.execute(
            "INSERT INTO telemetry_latest SELECT DISTINCT ON (device_id) * FROM telemetry_sample "
            "WHERE ts >= %s ORDER BY device_id, ts DESC", [now - timedelta(seconds=5)])
        cur.execute("UPDATE telemetry_latest SET ts = %s", [now])
        minute0 = (now - timedelta(hours=6)).replace(second=0)
        cur.execute(
            "INSERT INTO telemetry_rollup_1m (device_id, bucket, samples, covered_s, util_mean_pct, util_max_pct, "
            "power_mean_w, power_max_w, temp_max_c, energy_j, energy_from) "
            "SELECT d, %s + make_interval(mins => m), 60, 60, 50, 90, 400, 600, 60, 24000, 'counter' "
            "FROM generate_series(1, %s) d, generate_series(0, 359) m", [minute0, devices])
        print(f"  latest and rollups done ({time.perf_counter() - started:.0f} s)", flush=True)

    install_examples()
    user = get_user_model().objects.get_or_create(username="bench")[0]
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    with transaction.atomic():
        job = Job.start(name="bench-2000", team="team-1", env="arithmetic", config={"steps": steps}, enqueue=False)
        Job.objects.filter(pk=job.pk).update(status="running", started_at=now - timedelta(seconds=2 * steps),
                                             steps_done=steps, baseline_pass1=30.0, latest_pass1=45.0)
        t0 = now - timedelta(seconds=2 * steps)
        metrics = {k: 0.5 for k in (
            "train/reward_std", "train/reward_min", "train/reward_max", "train/frac_reward_zero_std", "train/loss",
            "train/kl", "train/entropy", "train/clip_ratio", "train/grad_norm", "train/lr", "train/response_length_mean",
            "train/truncated_rate", "train/tool_calls_mean", "performance/gen_tokens_per_s",
            "performance/train_tokens_per_s", "performance/tokens_total", "timing/generate_s", "timing/score_s",
            "timing/train_s", "timing/eval_s", "timing/checkpoint_s", "timing/step_s")}
        rows = []
        for s in range(steps + 1):
            m = {**metrics, "train/reward_mean": 0.3 + s / (4 * steps), "performance/gen_tokens": 4000}
            if s % 25 == 0:
                m["eval/pass1"] = 30.0 + 15.0 * s / steps
            rows.append(Step(job=job, step=s, at=t0 + timedelta(seconds=2 * s), metrics=m,
                             reward_mean=m["train/reward_mean"], eval_pass1=m.get("eval/pass1"), gen_tokens=4000,
                             step_s=2.0))
        Step.objects.bulk_create(rows, batch_size=1000)
        Sample.objects.bulk_create([Sample(job=job, step=s, index=i, prompt="12+30=", completion="42", reward=1.0,
                                           advantage=0.1) for s in range(1, steps + 1) for i in range(4)],
                                   batch_size=2000)
        Stint.objects.create(job=job, node="sim-0000", device="GPU-sim-0", device_name="H100", pid=1, started_at=t0)
    from costs.attribution import attribute

    attribute(now=now)  # charges the last 6 h of rollups: the job's device and idle for the rest
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    return job


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10_000_000, help="raw samples in all (default 10M)")
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--fresh", action="store_true", help="rebuild the data even when the sizes match")
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection
    from django.test import Client

    from yardstick.services import embedded_services_for_command

    with embedded_services_for_command():  # Redis too: the cache the fleet page reads
        use_bench_database(BENCH_DB, args.fresh)
        from trainer.models import Job

        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM collector_device")
            have_devices = cur.fetchone()[0]
            cur.execute("SELECT reltuples::bigint FROM pg_class WHERE relname LIKE 'telemetry_sample_p%%'")
            have_samples = sum(r[0] for r in cur.fetchall())
        job = Job.objects.filter(name="bench-2000").first()
        wanted = args.devices * max(1, args.samples // args.devices)
        if args.fresh or have_devices != args.devices or job is None or job.steps_done != args.steps \
                or abs(have_samples - wanted) > wanted * 0.05:
            job = fill(args.devices, args.samples, args.steps)
        else:
            print(f"reusing {BENCH_DB}: {have_devices} devices, ~{have_samples:,} samples, job of {job.steps_done} steps")
            from django.utils import timezone as djtz

            with connection.cursor() as cur:  # fresh again, so the page shows busy/idle rather than stale
                cur.execute("UPDATE telemetry_latest SET ts = %s", [djtz.now()])

        from django.contrib.auth import get_user_model

        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))

        def get(path):
            resp = client.get(path)
            assert resp.status_code == 200, (path, resp.status_code)
            return resp

        def select1():
            with connection.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchone()

        from django.core.cache import cache
        from django.utils import timezone as djtz

        from costs.live import fleet_today_key
        from costs.tasks import attribute

        def empty_cache():
            cache.delete(fleet_today_key(djtz.now().date()))

        empty_cache()
        fleet_cold = timed(lambda: get("/"), 1)[0]  # first request: templates, PostgreSQL's buffers, the totals
        job_cold = timed(lambda: get(f"/jobs/{job.pk}"), 1)[0]
        empty_cache()
        fleet_uncached = timed(lambda: get("/"), 1)[0]  # warm otherwise: the page computes today's totals
        empty_cache()
        task_ms = timed(attribute, 1)[0]  # attribution of the minutes since the last run, budgets, totals, publish
        fleet_after_task = timed(lambda: get("/"), 1)[0]  # the totals the task left in the cache
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM costs_allocation "
                        "WHERE minute >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'")
            today_rows = cur.fetchone()[0]
        results = {
            "SELECT 1": timed(select1, args.rounds * 10),
            "/api/whoami": timed(lambda: get("/api/whoami"), args.rounds),
            "fleet /": timed(lambda: get("/"), args.rounds),
            f"job /jobs/{job.pk}": timed(lambda: get(f"/jobs/{job.pk}"), args.rounds),
        }
        size = len(get("/").content), len(get(f"/jobs/{job.pk}").content)

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\nserver time, median of {args.rounds} (SELECT 1: {args.rounds * 10}); "
          f"{args.devices} devices, ~{wanted:,} samples, {args.steps} steps")
    for name, value in med.items():
        print(f"  {name:<22} {value:8.2f} ms   (min {min(results[name]):.2f}, max {max(results[name]):.2f})")
    fleet, jobp = med["fleet /"], med[f"job /jobs/{job.pk}"]
    print(f"  first request (cold caches): fleet {fleet_cold:.0f} ms, job {job_cold:.0f} ms; "
          f"HTML {size[0] / 1024:.0f} KiB / {size[1] / 1024:.0f} KiB")
    print(f"  fleet, today's totals not cached: {fleet_uncached:.0f} ms; right after the attribute task "
          f"({task_ms:.0f} ms): {fleet_after_task:.0f} ms ({today_rows:,} allocation rows today)")
    print(f"fleet page: {fleet:.1f} ms = {fleet / FLEET_GOAL_MS:.2f} x goal ({FLEET_GOAL_MS} ms), "
          f"{fleet / med['SELECT 1']:.0f} x SELECT 1, {fleet / med['/api/whoami']:.1f} x /api/whoami")
    print(f"job page:   {jobp:.1f} ms = {jobp / JOB_GOAL_MS:.2f} x goal ({JOB_GOAL_MS} ms), "
          f"{jobp / med['SELECT 1']:.0f} x SELECT 1, {jobp / med['/api/whoami']:.1f} x /api/whoami")


if __name__ == "__main__":
    main()

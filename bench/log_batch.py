"""Metric values per second through the MLflow tracking API's log-batch, against a bare insert of the same rows.

    python bench/log_batch.py [--calls 20] [--batch 1000] [--keys 50]

Runs Daphne (the real ASGI app, as `make run` serves it) as a subprocess on its
own database `bench_tracking` on the settings' server (embedded PostgreSQL and
Redis under YARDSTICK_DATA_DIR, default var/bench), and drives it with the real
MLflow client as a training run does: `MlflowClient.log_batch` with --batch
metrics per call (--keys metric keys x batch/keys steps, the shape of a
framework logging its dozens of metrics each step), one call after another,
authenticated with a reporter's token.

Against it, in the same run and on the same server: the same rows written
straight into the same table (tracking_metric) with psycopg, once with
executemany and once with COPY, each call's rows in one transaction. The API
does more than that insert (HTTP and JSON, validation, authentication, the
job's Step rows with the mapped keys, the live event), so the ratio is what
all of that costs per value. Prints values per second for each and the ratio;
never fails on speed.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
os.environ.setdefault("YARDSTICK_DATA_DIR", str(ROOT / "var" / "bench"))

from bench.live_latency import database_url, serving, use_bench_database  # noqa: E402

BENCH_DB = "bench_tracking"
COLUMNS = ("run_id", "key", "value", "timestamp", "step")


def batches(calls, batch, keys):
    """`calls` lists of `batch` (key, value, timestamp ms, step): keys x steps, steps running on across calls."""
    per_call = batch // keys
    now_ms = int(time.time() * 1000)
    out = []
    for c in range(calls):
        rows = []
        for s in range(per_call):
            step = c * per_call + s
            rows += [(f"train/metric_{k:03d}", 0.001 * step + k, now_ms + step, step) for k in range(keys)]
        out.append(rows)
    return out


def reporter_token():
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from yardstick.models import ApiToken

    User = get_user_model()
    user = User.objects.filter(username="bench-reporter").first() or User.objects.create_user("bench-reporter")
    user.groups.add(Group.objects.get_or_create(name="reporter")[0])
    token, _ = ApiToken.issue(user, "bench tracking")
    return token


def through_api(base, token, data):
    """Seconds per call of MlflowClient.log_batch, one run, the calls in order."""
    os.environ["MLFLOW_TRACKING_TOKEN"] = token
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=base)
    experiment = client.create_experiment(f"bench-{int(time.time() * 1000)}")
    run = client.create_run(experiment, run_name="log-batch")
    client.log_batch(run.info.run_id, [Metric("warm/up", 0.0, int(time.time() * 1000), 0)])  # connection, caches
    seconds = []
    for rows in data:
        metrics = [Metric(k, v, t, s) for k, v, t, s in rows]
        started = time.perf_counter()
        client.log_batch(run.info.run_id, metrics)
        seconds.append(time.perf_counter() - started)
    client.set_terminated(run.info.run_id)
    return run.info.run_id, seconds


def bare_insert(run_pk, data, how):
    """Seconds per call of inserting the same rows into tracking_metric straight, each call one transaction."""
    import psycopg

    seconds = []
    table = "tracking_metric"
    with psycopg.connect(database_url()) as conn:
        for rows in data:
            full = [(run_pk, k, v, t, s) for k, v, t, s in rows]
            started = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur:
                if how == "COPY":
                    with cur.copy(f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                        for row in full:
                            copy.write_row(row)
                else:
                    cur.executemany(f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s, %s)", full)
            seconds.append(time.perf_counter() - started)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="log-batch calls (default 20)")
    parser.add_argument("--batch", type=int, default=1000, help="metrics per call (default 1000, MLflow's most)")
    parser.add_argument("--keys", type=int, default=50, help="metric keys per step (default 50)")
    args = parser.parse_args()
    if args.calls < 1 or not 1 <= args.keys <= args.batch or args.batch % args.keys:
        parser.error(f"need --calls >= 1 and --keys dividing --batch; got --calls {args.calls} --batch {args.batch} "
                     f"--keys {args.keys}")

    import django

    django.setup()
    from django.db import connection

    from tracking.models import Run
    from yardstick.services import embedded_services_for_command

    data = batches(args.calls, args.batch, args.keys)
    values = args.calls * args.batch
    with embedded_services_for_command(redis=True):
        use_bench_database(BENCH_DB)
        with connection.cursor() as cur:
            cur.execute("TRUNCATE tracking_metric")
        token = reporter_token()
        try:
            with serving("bench-tracking-daphne.log") as base:
                run_id, api_s = through_api(base, token, data)
            run_pk = Run.objects.get(run_id=run_id).pk
            # The same rows again, into the same table and for the same run (metrics keep every logged value).
            many_s = bare_insert(run_pk, data, "executemany")
            copy_s = bare_insert(run_pk, data, "COPY")
            stored = Run.objects.get(pk=run_pk).metrics.exclude(key="warm/up").count()
        finally:
            connection.close()
    if stored != 3 * values:
        raise SystemExit(f"expected {3 * values} stored values (API, executemany, COPY), found {stored}")

    print(f"\n{args.calls} calls of {args.batch} metric values ({args.keys} keys x {args.batch // args.keys} steps) "
          f"each, one run; rate over all calls, median call in brackets")
    api_rate = values / sum(api_s)
    for name, seconds in (("log-batch (MLflow client → API)", api_s), ("bare insert, executemany", many_s),
                          ("bare insert, COPY", copy_s)):
        rate = values / sum(seconds)
        print(f"  {name:<34} {rate:>10,.0f} values/s  ({statistics.median(seconds) * 1000:6.1f} ms per call)"
              + ("" if seconds is api_s else f"   {rate / api_rate:.1f}x the API's rate"))


if __name__ == "__main__":
    main()

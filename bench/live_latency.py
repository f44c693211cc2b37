"""Write a step or a sample, and time until it is on the socket and on the chart in a real browser.

    python bench/live_latency.py [--rounds 20]

Runs Daphne (the real ASGI app) as a subprocess on its own database
`bench_live` on the settings' server (embedded PostgreSQL and Redis under
YARDSTICK_DATA_DIR, default var/bench via `make bench`), and Debian's Chromium
through Playwright logged in as a viewer:

- step: the trainer's write path (a Step row, the job's running figures, and
  `publish("job.N", "step", ...)` after commit) → the job page's socket →
  `Plotly.extendTraces` on the reward chart;
- sample: a new newest sample of a device (`telemetry_latest`, as the agent
  writes it) → the per-process broadcaster's poll → the node page's socket →
  the utilization chart.

Times are wall-clock milliseconds from just before the write's transaction to
the browser's `Date.now()` at arrival / after the redraw (one machine, one
clock). Prints median, p90 and max against the goal (<= 1 s). Never fails on speed.
"""

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
os.environ.setdefault("YARDSTICK_DATA_DIR", str(ROOT / "var" / "bench"))

BENCH_DB = "bench_live"
GOAL_MS = 1000
PASSWORD = "bench-live-password"

RECORDER = """
() => {
  window.__arrive = {}; window.__drawn = {};
  document.addEventListener("yardstick:event", (e) => {
    const ev = e.detail;
    if (ev.kind === "step") window.__arrive["step:" + ev.data.step] = Date.now();
    if (ev.kind === "samples") ev.data.samples.forEach((s) => { window.__arrive["ts:" + s.ts] = Date.now(); });
  });
  // A chart with nothing to draw yet is not a plot (no .on) until its first point arrives: attach
  // to each chart as soon as Plotly has made it one.
  const watch = () => document.querySelectorAll(".chart[data-fig]").forEach((el) => {
    if (el.__watched || typeof el.on !== "function") return;
    el.__watched = true;
    el.on("plotly_afterplot", () => {
      const now = Date.now();
      el.data.forEach((t) => {
        const last = t.x && t.x.length ? t.x[t.x.length - 1] : null;
        const key = typeof last === "number" ? "step:" + last : "ts:" + last;
        if (last !== null && !(key in window.__drawn)) window.__drawn[key] = now;
      });
    });
  });
  watch();
  setInterval(watch, 20);
}
"""


def use_bench_database(name):
    from django.conf import settings
    from django.db import connection

    settings.DATABASES["default"]["TEST"] = {"NAME": name, "CHARSET": None, "TEMPLATE": None, "COLLATION": None,
                                            "MIGRATE": True, "MIRROR": None}
    connection.settings_dict["TEST"] = settings.DATABASES["default"]["TEST"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=True)


def database_url():
    from urllib.parse import quote

    from django.db import connection

    cfg = connection.settings_dict
    auth = quote(cfg.get("USER") or "", safe="") + (":" + quote(cfg["PASSWORD"], safe="") if cfg.get("PASSWORD") else "")
    return f"postgresql://{auth}@{quote(cfg.get('HOST') or 'localhost', safe='')}:{cfg.get('PORT') or 5432}/{cfg['NAME']}"


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except Exception:  # noqa: BLE001 - not up yet: try again
            time.sleep(0.2)
    raise SystemExit(f"Daphne did not answer at {url} within {timeout_s} s")


@contextlib.contextmanager
def serving(log_name):
    """Daphne (the real ASGI app) on the bench database as a subprocess, its output in DATA_DIR/log_name;
    yields its base URL and stops it on the way out."""
    from django.conf import settings

    base = f"http://127.0.0.1:{free_port()}"
    log = open(Path(settings.DATA_DIR) / log_name, "w")
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL,
           "SECRET_KEY": settings.SECRET_KEY, "DJANGO_ALLOW_ASYNC_UNSAFE": ""}
    daphne = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", base.rsplit(":", 1)[1],
                               "yardstick.asgi:application"], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(base + "/healthz")
        yield base
    finally:
        daphne.terminate()
        daphne.wait(timeout=20)
        log.close()


def prepare():
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection

    from collector.models import Device, LatestSample, Node
    from trainer.models import Job

    with connection.cursor() as cur:
        cur.execute("TRUNCATE trainer_job, trainer_step, trainer_sample, trainer_stint, trainer_statuschange CASCADE")
        cur.execute("TRUNCATE telemetry_latest, collector_device, collector_node CASCADE")
    User = get_user_model()
    user = User.objects.filter(username="bench-viewer").first() or User.objects.create_user("bench-viewer")
    user.set_password(PASSWORD)
    user.save()
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    job = Job.start(name="latency", team="bench", env="arithmetic", config={"steps": 100000}, enqueue=False)
    Job.objects.filter(pk=job.pk).update(status="running")
    now = datetime.now(timezone.utc)
    node = Node.objects.create(name="bench-node", labels={}, interval_s=1.0, first_seen=now, registered_at=now)
    device = Device.objects.create(uuid="GPU-bench-0", node=node, index=0, model="sim", source="sim", simulated=True,
                                   first_seen=now, registered_at=now)
    LatestSample.objects.create(device=device, ts=now, util_pct=10, power_w=100)
    return job, node, device


def write_step(job, step):
    """What trainer.runner._record does for one step: the row, the job's figures, the event after commit."""
    from django.db import transaction

    from trainer.models import Job, Step
    from yardstick.live import publish

    metrics = {"train/reward_mean": 0.5, "train/reward_std": 0.1, "timing/step_s": 0.5}
    with transaction.atomic():
        Step.objects.create(job=job, step=step, metrics=metrics, reward_mean=0.5)
        Job.objects.filter(pk=job.pk).update(steps_done=step, latest_reward_mean=0.5)
        publish(f"job.{job.pk}", "step", {"job": job.pk, "step": step, "steps": 100000, "metrics": metrics})


def write_sample(device, util):
    """What the agent does each tick for one device: a raw sample and the newest-sample row."""
    from django.db import connection, transaction

    from collector.agent import schema

    ts = datetime.now(timezone.utc)
    with transaction.atomic(), connection.cursor() as cur:
        schema.ensure_partitions(cur, [ts.date()])
        cur.execute("INSERT INTO telemetry_sample (device_id, ts, util_pct, power_w) VALUES (%s, %s, %s, 300)",
                    [device.id, ts, util])
        cur.execute("UPDATE telemetry_latest SET ts = %s, util_pct = %s, power_w = 300 WHERE device_id = %s",
                    [ts, util, device.id])
    return ts


def summary(name, values):
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(round(0.9 * (len(values) - 1))))]
    med = statistics.median(values)
    print(f"  {name:<34} median {med:7.0f} ms  p90 {p90:7.0f} ms  max {max(values):7.0f} ms  "
          f"= {med / GOAL_MS:.2f} x goal ({GOAL_MS} ms)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    import django

    django.setup()
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs a loop in this thread
    from django.db import connection

    from yardstick.services import embedded_services_for_command

    with embedded_services_for_command(redis=True):
        use_bench_database(BENCH_DB)
        job, node, device = prepare()
        try:
            with serving("bench-live-daphne.log") as base:
                steps, samples = measure(base, job, node, device, args.rounds)
        finally:
            connection.close()

    print(f"\nlive latency, {args.rounds} rounds each (goal: on screen within {GOAL_MS} ms of the write)")
    summary("step → socket (job page)", [s[0] for s in steps])
    summary("step → on the reward chart", [s[1] for s in steps])
    summary("sample → socket (node page)", [s[0] for s in samples])
    summary("sample → on the utilization chart", [s[1] for s in samples])


def measure(base, job, node, device, rounds):
    from concurrent.futures import ThreadPoolExecutor

    from playwright.sync_api import sync_playwright

    from tests.browser import chromium_flags, chromium_path

    # Writes run on a thread of their own, as in a worker: Playwright's sync API keeps an event
    # loop in this one, where publish()'s async_to_sync may not run.
    writer = ThreadPoolExecutor(max_workers=1)
    steps, samples = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=chromium_flags())
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.set_default_timeout(20000)
        page.goto(base + "/accounts/login/")
        page.fill("#id_username", "bench-viewer")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/")

        page.goto(f"{base}/jobs/{job.pk}")
        page.wait_for_selector('#live-state[data-state="live"]')
        page.evaluate(RECORDER)
        for step in range(1, rounds + 1):
            t0 = time.time() * 1000
            writer.submit(write_step, job, step).result()
            page.wait_for_function(f"window.__drawn['step:{step}']")
            got = page.evaluate(f"[window.__arrive['step:{step}'], window.__drawn['step:{step}']]")
            steps.append((got[0] - t0, got[1] - t0))
            time.sleep(0.3)

        page.goto(f"{base}/nodes/{node.name}?range=15m")
        page.wait_for_selector('#live-state[data-state="live"]')
        page.evaluate(RECORDER)
        time.sleep(1.0)  # the poller's first read (what the page already shows)
        pace = random.Random(7)
        for i in range(rounds):
            t0 = time.time() * 1000
            ts = writer.submit(write_sample, device, 20 + i).result()
            key = "ts:" + ts.isoformat()
            page.wait_for_function(f"window.__drawn[{key!r}]")
            got = page.evaluate(f"[window.__arrive[{key!r}], window.__drawn[{key!r}]]")
            samples.append((got[0] - t0, got[1] - t0))
            # A random pause: a fixed one locks the writes to one phase of the 0.5 s poller
            # (always just after a poll, or just before), and the figures show that phase, not the spread.
            time.sleep(pace.uniform(0.2, 1.2))
        browser.close()
    writer.shutdown()
    return steps, samples


if __name__ == "__main__":
    main()

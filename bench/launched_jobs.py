"""Launched jobs: from Launch to the page, how many output lines a second the page keeps up with, and what
20 chatty jobs cost the web server and the database.

    python bench/launched_jobs.py [--rounds 3] [--jobs 20] [--rate 100] [--duration 30]
                           [--rates 100,1000,2500,5000,10000] [--rate-seconds 5] [--no-ray] [--ray-rounds 3]

Runs the control plane's parts as processes of their own on the bench database `bench_launch` (embedded
PostgreSQL and Redis under YARDSTICK_DATA_DIR, default var/bench via `make bench`): Daphne (the argv `up`
gives it) and this node's launch worker (`celery -A yardstick worker -Q launch@<node> -n launch@<node>
--pool threads --concurrency 24`, YARDSTICK_URL at that Daphne), and Debian's Chromium through Playwright
logged in as an operator. Two recipes, defined as an admin would (and two more for (e), below):

- bench-trl-grpo: launch/examples/recipes.yaml's trl-grpo, its model root a temporary folder holding the tiny
  GPT-2 and character tokenizer of tests/trl_tiny.py (on cpu when the worker reports no GPU), 1 step;
- bench-printer: `{python} -c` printing `rate` lines a second for `seconds`, 80 characters each carrying
  the time it was printed; held, for (c) and (d), until the bench writes a file `go` into the job's folder.

Measured (wall-clock ms on this one machine, from just before POST /api/launch; the job page is opened
right after the POST, as the Start form's redirect does):

(a) launch -> the first line on the job page's output panel (Yardstick's own "started on ...", then the
    command's first), the TRL recipe, and the printer as the reference (what the framework's start adds);
(b) launch -> the first step on the page's reward chart (the animation frame after Plotly has its point),
    TRL, against when the run logged that step's reward (its MLflow timestamp): what the live path adds;
(c) one printer at each of --rates for --rate-seconds, its page open: lines/s the worker read, that arrived
    on the page's socket and that showed in the panel (the frame after they are in #output-lines), against
    the rate printed, and the lag (arrival - printed) of the last line;
(d) --jobs printers at --rate lines/s, each watched by a WebSocket viewer of its topic (a process of its
    own), over --duration s: CPU of the web server, the launch worker, the commands, PostgreSQL and Redis;
    web RSS; commits, new connections and rows written (pg_stat_database), launch_outputline bytes; the lines
    that reached the viewers and the events the channel layer dropped; against the same jobs printing
    nothing over the same time;
(e) unless --no-ray: on a Ray head the bench starts itself (tests/ray_head.py, 2 CPUs on loopback) and registers as
    a cluster, bench-steps-ray: `{python} {yardstick}/tests/launch/steps_script.py --out {job_dir} --steps 200
    --sleep 0.2 --ignore-stop` (a step logged through MLflow every 0.2 s, ending only at a signal), executor ray,
    shared_dir a temporary folder, stop_grace_s [2, 3], followed as production follows it: celery beat and a
    default-queue worker with the argv `up` gives them (yardstick/runner.py), so launch.tasks.follow_clusters runs
    every settings.LAUNCH_FOLLOW_S among the rest of the upkeep and follow_remote right after each launch. Per
    round (--ray-rounds), the page open: POST -> Ray says RUNNING (its Jobs API) and Yardstick has it so
    (Launch.remote_status), -> the first step on the reward chart as in (b); then Stop (POST /api/jobs/<id>/stop,
    what the page's Stop button does) -> the stop flag, SIGTERM, Ray says STOPPED, the job stopped, 'stopped' on
    the page. The reference, alternating with it: bench-steps-node, the same recipe with no executor, on the
    bench's launch worker: POST -> the first step on the chart, Stop -> stopped; the ratios Ray / node.

When the job page has no output panel (#output-lines), the figures of (a) and (c) are the "output" events'
arrival on the page's socket, and say so. Job ids start at 10^9 and up: another Yardstick's launch worker on
this machine (a test suite's, ids from 1) SIGKILLs at the end of its job N every process whose
YARDSTICK_JOB_ID is N (launch/guard.py), ours too. Never fails on speed; exits 0 once measured.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
os.environ.setdefault("YARDSTICK_DATA_DIR", str(ROOT / "var" / "bench"))

BENCH_DB = "bench_launch"
OPERATOR = "bench-launch-operator"
TEAM = "bench"
TRL = "bench-trl-grpo"
PRINTER = "bench-printer"
ENDED = ("completed", "failed", "stopped", "budget_exhausted")
CONCURRENCY = 24
JOB_ID_BASE = 10**9  # job topics take up to 12 digits (dashboard/consumers.py)

# The printer: `rate` lines a second for `seconds` (none, sleeping, at rate 0), each "ln <i> <ms printed> xxx"
# padded to `width` characters; with gate 1 it waits for a file "go" in its folder (the job's) first.
PRINTER_CODE = r"""
import os, sys, time
rate, seconds, width, gate = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if gate:
    deadline = time.time() + 300
    while not os.path.exists("go") and time.time() < deadline:
        time.sleep(0.01)
n = int(rate * seconds)
start = time.time()
i = 0
while i < n:
    due = min(n, int((time.time() - start) * rate) + 1)
    chunk = []
    while i < due:
        chunk.append(("ln %d %.1f " % (i, time.time() * 1000)).ljust(width, "x"))
        i += 1
    sys.stdout.write("\n".join(chunk) + "\n")
    sys.stdout.flush()
    time.sleep(max(0.001, i / rate - (time.time() - start)))
if n == 0:
    time.sleep(seconds)
"""

# Installed before the job page's own scripts. Lines: when each first shows in #output-lines (the animation
# frame after it was added) and when its "output" event arrives; steps: the first "step" event and the first
# point of the reward chart's mean trace (the frame after Plotly has it); when the status badge first says stopped.
RECORDER = """
(() => {
  const R = window.__bench = {firstLine: {}, steps: null, stepNo: null, rewardEv: null, chartAt: null, chartStep: null,
                              liveAt: null, panel: null, stoppedAt: null};
  const bucket = () => ({n: 0, seqs: new Set(), firstAt: null, lastAt: null, firstIndex: null, lastIndex: null,
                         firstPrinted: null, lastPrinted: null, lastLag: null, lags: []});
  R.dom = bucket(); R.ev = bucket();
  const PRINTED = /^ln (\\d+) (\\d+(?:\\.\\d+)?) /;
  function seen(b, key, seq, stream, text, now) {
    if (b.seqs.has(seq)) return;
    b.seqs.add(seq);
    if (!R.firstLine[key + ":any"]) R.firstLine[key + ":any"] = now;
    if (stream !== "yardstick" && !R.firstLine[key + ":cmd"]) R.firstLine[key + ":cmd"] = now;
    const m = stream === "stdout" && PRINTED.exec(text);
    if (!m) return;
    const index = Number(m[1]), printed = Number(m[2]);
    b.n += 1;
    if (b.firstAt === null) { b.firstAt = now; b.firstIndex = index; b.firstPrinted = printed; }
    b.lastAt = now; b.lastIndex = index; b.lastPrinted = printed; b.lastLag = now - printed;
    b.lags.push(now - printed);
  }
  new MutationObserver((records) => {
    const added = [];
    for (const r of records) {
      if (!r.target || r.target.id !== "output-lines") continue;
      for (const n of r.addedNodes) {
        if (n.nodeType === 1 && n.classList.contains("line") && n.dataset.seq) added.push(n);
      }
    }
    if (!added.length) return;
    requestAnimationFrame(() => {
      const now = Date.now();
      added.forEach((n) => {
        const tx = n.querySelector(".tx");
        seen(R.dom, "dom", Number(n.dataset.seq), n.dataset.stream, tx ? tx.textContent : "", now);
      });
    });
  }).observe(document, {childList: true, subtree: true});
  document.addEventListener("yardstick:event", (e) => {
    const ev = e.detail, now = Date.now();
    if (ev.kind === "output") (ev.data.lines || []).forEach((l) => seen(R.ev, "ev", l[0], l[1], l[2], now));
    if (ev.kind === "step") {
      if (R.steps === null) { R.steps = now; R.stepNo = ev.data.step; }
      if (R.rewardEv === null && ev.data.metrics && ev.data.metrics["train/reward_mean"] != null) R.rewardEv = now;
    }
  });
  const poll = setInterval(() => {
    if (R.panel === null && document.readyState !== "loading") R.panel = !!document.getElementById("output-lines");
    const state = document.getElementById("live-state");
    if (R.liveAt === null && state && state.dataset.state === "live") R.liveAt = Date.now();
    const badge = document.querySelector("#job-status .status");
    if (R.stoppedAt === null && badge && badge.dataset.status === "stopped") {
      R.stoppedAt = -1;
      requestAnimationFrame(() => { R.stoppedAt = Date.now(); });
    }
    const el = document.querySelector('.chart[data-fig="reward"]');
    const t = el && el.data && el.data[2];
    if (R.chartAt !== null || !t || !t.y) return;
    const i = Array.from(t.y).findIndex((v) => v !== null && v !== undefined);
    if (i < 0) return;
    R.chartAt = -1;
    requestAnimationFrame(() => { R.chartAt = Date.now(); R.chartStep = t.x[i]; });
  }, 10);
  R.snapshot = (withLags) => {
    const out = {};
    ["dom", "ev"].forEach((k) => {
      const b = R[k];
      out[k] = {n: b.n, firstAt: b.firstAt, lastAt: b.lastAt, firstIndex: b.firstIndex, lastIndex: b.lastIndex,
                firstPrinted: b.firstPrinted, lastPrinted: b.lastPrinted, lastLag: b.lastLag,
                lags: withLags ? b.lags : []};
    });
    return {...out, firstLine: R.firstLine, steps: R.steps, stepNo: R.stepNo, rewardEv: R.rewardEv,
            chartAt: R.chartAt, chartStep: R.chartStep, liveAt: R.liveAt, panel: R.panel, stoppedAt: R.stoppedAt};
  };
})();
"""


def now_ms():
    return time.time() * 1000


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else None


def p50_p90(values, unit="ms"):
    if not values:
        return "no value"
    return (f"p50 {statistics.median(values):,.0f} {unit}, p90 {pct(values, 0.9):,.0f} {unit} "
            f"({len(values)} round{'s' if len(values) != 1 else ''})")


# -- the control plane's parts --------------------------------------------------------------------------------


def use_bench_database():
    from django.db import connection

    from bench.live_latency import use_bench_database as use

    use(BENCH_DB)
    with connection.cursor() as cur:
        # Every job of an earlier run (their lines, steps, runs, stints go with them) and the worker rows.
        cur.execute("TRUNCATE trainer_job, trainer_worker CASCADE")
        # Job ids far from those of any other Yardstick on this machine (a test suite's start at 1): a launch
        # worker's kill_all (launch/guard.py) takes every process whose YARDSTICK_JOB_ID is its job's id for
        # its own, whichever database that job is in, and SIGKILLs it at the end of its run.
        cur.execute("SELECT setval(pg_get_serial_sequence('trainer_job', 'id'), %s)",
                    [JOB_ID_BASE + int(time.time()) % 100_000 * 10_000])


def child_env(**extra):
    from django.conf import settings

    from bench.live_latency import database_url

    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL,
           "SECRET_KEY": settings.SECRET_KEY, **extra}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return env


class Parts:
    """Daphne and the launch worker, each a process in a session of its own, logs in DATA_DIR."""

    def __init__(self):
        self.procs = {}

    def start(self, name, argv, env):
        from django.conf import settings

        log = open(Path(settings.DATA_DIR) / f"bench-launch-{name}.log", "w")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = (proc, log)
        return proc

    def pid(self, name):
        return self.procs[name][0].pid

    def check(self):
        from django.conf import settings

        for name, (proc, _log) in self.procs.items():
            if proc.poll() is not None:
                path = Path(settings.DATA_DIR) / f"bench-launch-{name}.log"
                tail = path.read_text(errors="replace").splitlines()[-20:]
                raise SystemExit(f"{name} ended early (status {proc.returncode}); its log {path}:\n  "
                                 + "\n  ".join(tail))

    def stop(self, names=None):
        for name, (proc, log) in [(n, p) for n, p in self.procs.items() if names is None or n in names]:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
            del self.procs[name]


def purge(queue):
    from yardstick.celery import app

    with app.connection_for_write() as conn, contextlib.suppress(Exception):
        conn.default_channel.queue_purge(queue)


def start_parts(parts):
    """Daphne, then the launch worker reporting to it; wait until both answer. Return (base URL, worker name)."""
    from django.conf import settings

    from bench.live_latency import free_port, wait_http
    from trainer.models import Worker
    from trainer.workers import LAUNCH_PREFIX
    from yardstick.runner import children_for

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    parts.start("web", children_for(settings, ["web"], "127.0.0.1", port)[0].argv, child_env())
    wait_http(base + "/healthz")
    name = f"{LAUNCH_PREFIX}{settings.YARDSTICK_NODE}"  # the launch worker `up` starts (yardstick/runner.py)
    purge(name)
    parts.start("worker", [sys.executable, "-m", "celery", "-A", "yardstick", "worker", "-Q", name, "-n", name,
                           "--pool", "threads", "--concurrency", str(CONCURRENCY), "--prefetch-multiplier", "1",
                           "--loglevel", "INFO"], child_env(YARDSTICK_URL=base))
    wait(lambda: Worker.objects.filter(name=name).first(), 120, "the launch worker's report", parts)
    return base, name


def wait(check, timeout_s, what, parts=None, every_s=0.05):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if parts is not None:
            parts.check()
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(every_s)


# -- users, recipes, launches -----------------------------------------------------------------------------


def prepare_users():
    """An operator (launches, watches), its API token and a session cookie for the browser and sockets."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    from yardstick.models import ApiToken

    User = get_user_model()
    user = User.objects.filter(username=OPERATOR).first() or User.objects.create_user(OPERATOR)
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    admin = User.objects.filter(username="bench-launch-admin").first() or User.objects.create_user("bench-launch-admin")
    admin.groups.add(Group.objects.get_or_create(name="admin")[0])
    token, _ = ApiToken.issue(user, name="bench-launch")
    client = Client()
    client.force_login(user)
    return admin, token, settings.SESSION_COOKIE_NAME, client.cookies[settings.SESSION_COOKIE_NAME].value


def save_tiny_model(root):
    from transformers.utils import logging

    from tests.trl_tiny import char_tokenizer, tiny_model

    logging.disable_progress_bar()  # in this process only: the launched runs print theirs
    tokenizer = char_tokenizer()
    tokenizer.save_pretrained(root / "tiny-gpt2")
    tiny_model(tokenizer).save_pretrained(root / "tiny-gpt2")


def define_recipes(admin, models_root, worker):
    """The TRL example recipe with its model root moved to `models_root` (cpu where the worker has no GPU),
    and the printer."""
    import yaml

    from launch.models import Recipe
    from trainer.models import Worker

    raw = {r["name"]: r for r in yaml.safe_load((ROOT / "launch/examples/recipes.yaml").read_text())["recipes"]}
    trl = {k: v for k, v in raw["trl-grpo"].items() if k != "name"}
    trl["params"] = [{**p, "root": str(models_root)} if p["name"] == "model" else p for p in trl["params"]]
    gpus = Worker.objects.get(name=worker).gpus
    if not gpus:
        trl["devices"] = {"kind": "cpu", "count": 1}
    Recipe.define(TRL, trl, admin)
    code = PRINTER_CODE.replace("{", "{{").replace("}", "}}")  # {name} is a placeholder in an argv item
    Recipe.define(PRINTER, {
        "description": "prints rate lines a second for seconds (bench/launched_jobs.py)",
        "argv": ["{python}", "-c", code, "{rate}", "{seconds}", "{width}", "{gate}"],
        "params": [
            {"name": "rate", "kind": "float", "default": 100, "minimum": 0, "maximum": 1000000, "help": "lines/s"},
            {"name": "seconds", "kind": "float", "default": 5, "minimum": 0, "maximum": 3600, "help": "seconds"},
            {"name": "width", "kind": "integer", "default": 80, "minimum": 20, "maximum": 4000, "help": "chars"},
            {"name": "gate", "kind": "integer", "default": 0, "minimum": 0, "maximum": 1,
             "help": "1: wait for a file 'go' in the job's folder"}],
        "devices": {"kind": "cpu", "count": 1},
        "stop_grace_s": [1, 1],
    }, admin)
    return "cuda" if gpus else "cpu"


def launch(base, token, recipe, **params):
    """POST /api/launch; (job id, ms just before the request)."""
    body = json.dumps({"recipe": recipe, "team": TEAM, "params": params}).encode()
    req = urllib.request.Request(base + "/api/launch", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    t0 = now_ms()
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["id"], t0


def job_status(job_id):
    from trainer.models import Job

    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first()


def wait_ended(job_ids, timeout_s, parts):
    from trainer.models import Job

    wait(lambda: Job.objects.filter(pk__in=job_ids, status__in=ENDED).count() == len(job_ids), timeout_s,
         f"jobs {job_ids} to end", parts, every_s=0.2)
    failed = list(Job.objects.filter(pk__in=job_ids, status="failed").values_list("pk", "error"))
    if failed:
        print(f"  note: {len(failed)} job(s) failed, the first: job {failed[0][0]}: {failed[0][1][:300]}", flush=True)


def running_with_pid(job_ids):
    from launch.models import Launch

    return Launch.objects.filter(pk__in=job_ids, pid__isnull=False, job__status="running").count() == len(job_ids)


def open_gate(job_ids):
    from launch.executor import job_dir
    from trainer.models import Job

    for job in Job.objects.filter(pk__in=job_ids):
        (job_dir(job) / "go").touch()


# -- the browser -----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def browser_page(base, cookie_name, cookie_value):
    from playwright.sync_api import sync_playwright

    from tests.browser import chromium_flags, chromium_path

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=chromium_flags())
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.add_cookies([{"name": cookie_name, "value": cookie_value, "url": base}])
            context.add_init_script(RECORDER)
            page = context.new_page()
            page.set_default_timeout(30000)
            yield page
        finally:
            browser.close()


def seen_on_page(page, with_lags=False):
    return page.evaluate(f"window.__bench.snapshot({'true' if with_lags else 'false'})")


def first_lines(base, token, page, parts, recipe, params, timeout_s, chart=None, tick=None):
    """One launch watched from its page: POST, open the page at once, wait for the command's first line
    (with `chart`, by default when `recipe` is TRL, for the first point of the reward chart instead), calling
    `tick(job id)` at each look; return what the page saw, t0, the job."""
    job_id, t0 = launch(base, token, recipe, **params)
    page.goto(f"{base}/jobs/{job_id}", wait_until="commit")
    want = ("window.__bench && window.__bench.chartAt > 0" if (recipe == TRL if chart is None else chart) else
            "window.__bench && (window.__bench.firstLine['dom:cmd'] || "
            "(window.__bench.panel === false && window.__bench.firstLine['ev:cmd']))")
    deadline, ended_at = time.monotonic() + timeout_s, None
    while not page.evaluate(want) and time.monotonic() < deadline:
        parts.check()
        if tick is not None:
            tick(job_id)
        if ended_at is None and job_status(job_id) in ENDED:
            ended_at = time.monotonic()
        if ended_at is not None and time.monotonic() > ended_at + 3:
            break  # it ended and what was on its way to the page has had time to arrive
        page.wait_for_timeout(50)
    return seen_on_page(page), t0, job_id


def round_breakdown(job_id, t0):
    """From the database: ms from t0 until the worker claimed the job, read its first line of the command,
    and the run logged its first step with a reward (its MLflow timestamp)."""
    from django.db.models import Min

    from launch.models import OutputLine
    from tracking.ingest import KNOWN_KEYS
    from tracking.models import Metric
    from trainer.models import Job, Step

    job = Job.objects.get(pk=job_id)
    first = OutputLine.objects.filter(job_id=job_id).exclude(stream="yardstick").order_by("seq").first()
    step = Step.objects.filter(job_id=job_id, reward_mean__isnull=False).order_by("step").first()
    logged = None
    if step is not None:  # when the run logged the reward of that step (its key that becomes train/reward_mean)
        keys = [k for k, v in KNOWN_KEYS.items() if v == "train/reward_mean"] + ["train/reward_mean"]
        stamp = Metric.objects.filter(run__job_id=job_id, step=step.step, key__in=keys).aggregate(t=Min("timestamp"))
        logged = stamp["t"] - t0 if stamp["t"] is not None else None
    return {"claimed": job.started_at.timestamp() * 1000 - t0 if job.started_at else None,
            "read": first.at.timestamp() * 1000 - t0 if first else None,
            "logged": logged, "step": step.step if step else None, "status": job.status}


def measure_launches(base, token, page, parts, rounds):
    """(a) and (b): TRL rounds, then printer rounds as the reference."""
    trl, printer = [], []
    # A browser that has shown Yardstick (and its Plotly) before. Not the Jobs page: its Start form imports torch
    # into the web process (dashboard/views.py), which would count in the web's RSS below.
    page.goto(f"{base}/")
    trl_params = {"model": "tiny-gpt2", "max_steps": 1, "save_steps": 1000, "eval_steps": 0}
    for i in range(rounds):
        seen, t0, job_id = first_lines(base, token, page, parts, TRL, trl_params, timeout_s=240)
        wait_ended([job_id], 240, parts)
        trl.append((seen, t0, round_breakdown(job_id, t0)))
        print(f"  TRL round {i + 1}: {describe_round(seen, t0, trl[-1][2])}", flush=True)
    for i in range(rounds):
        # Printing for 2 s: without an output panel only the lines after the page subscribed reach it.
        seen, t0, job_id = first_lines(base, token, page, parts, PRINTER, {"rate": 10, "seconds": 2}, timeout_s=60)
        wait_ended([job_id], 60, parts)
        printer.append((seen, t0, round_breakdown(job_id, t0)))
        print(f"  printer round {i + 1}: {describe_round(seen, t0, printer[-1][2])}", flush=True)
    return trl, printer


def _at(value, t0):
    return None if value is None or value <= 0 else value - t0


def describe_round(seen, t0, db):
    where = "dom" if seen.get("panel") else "ev"
    parts = [f"page live {_ms(_at(seen.get('liveAt'), t0))}", f"claimed {_ms(db['claimed'])}",
             f"Yardstick's line {_ms(_at(seen['firstLine'].get(where + ':any'), t0))}",
             f"command's first line read {_ms(db['read'])}, on page {_ms(_at(seen['firstLine'].get(where + ':cmd'), t0))}"]
    if db["logged"] is not None or seen.get("chartAt"):
        parts.append(f"step {db['step']} logged {_ms(db['logged'])}, step event {_ms(_at(seen.get('rewardEv'), t0))}, "
                     f"on the chart {_ms(_at(seen.get('chartAt'), t0))}")
    return "; ".join(parts) + f" ({db['status']})"


def _ms(value):
    return "-" if value is None else f"{value:,.0f} ms"


def worker_side(job_id):
    """The printed lines as the worker read them (OutputLine.at): a bucket shaped as the page's."""
    from launch.models import OutputLine

    got = {"n": 0, "firstAt": None, "lastAt": None, "firstIndex": None, "lastIndex": None, "firstPrinted": None,
           "lastPrinted": None, "lastLag": None, "lags": []}
    rows = OutputLine.objects.filter(job_id=job_id, stream="stdout").order_by("seq").values_list("at", "text")
    for at, text in rows.iterator(chunk_size=5000):
        if not text.startswith("ln "):
            continue
        now, (_ln, index, printed, *_rest) = at.timestamp() * 1000, text.split(" ", 3)
        index, printed = int(index), float(printed)
        got["n"] += 1
        if got["firstAt"] is None:
            got.update(firstAt=now, firstIndex=index, firstPrinted=printed)
        got.update(lastAt=now, lastIndex=index, lastPrinted=printed, lastLag=now - printed)
        got["lags"].append(now - printed)
    return got


def measure_rates(base, token, page, parts, rates, seconds):
    """(c): one printer a rate, held until its page is live; what the worker read, what reached the page's
    socket and what its output panel showed."""
    results = []
    for rate in rates:
        job_id, _t0 = launch(base, token, PRINTER, rate=rate, seconds=seconds, gate=1)
        page.goto(f"{base}/jobs/{job_id}")
        wait(lambda job_id=job_id: page.evaluate("window.__bench.liveAt") and running_with_pid([job_id]), 60,
             f"job {job_id} running and its page live", parts)
        page.wait_for_timeout(300)  # the page's first fetch of lines (none yet) is done
        open_gate([job_id])
        n = int(rate * seconds)
        buckets = ["ev", "dom"] if page.evaluate("window.__bench.panel") else ["ev"]
        done = " && ".join(f"window.__bench.{b}.lastIndex >= {n - 1}" for b in buckets)
        deadline, ended_at = time.monotonic() + seconds + 60, None
        while time.monotonic() < deadline and not page.evaluate(done):
            parts.check()
            if ended_at is None and job_status(job_id) in ENDED:
                ended_at = time.monotonic()
            if ended_at is not None and time.monotonic() > ended_at + 10:
                break  # what has not arrived 10 s after the end is taken as lost
            page.wait_for_timeout(100)
        seen = seen_on_page(page, with_lags=True)
        wait_ended([job_id], 60, parts)
        results.append({"rate": rate, "n": n, "worker": worker_side(job_id), "ev": seen["ev"],
                        "dom": seen["dom"] if "dom" in buckets else None})
        print(f"  {rate:,.0f} lines/s: {seen[buckets[-1]]['n']:,} of {n:,} lines on the page", flush=True)
    return results


# -- (d): many jobs, their cost ----------------------------------------------------------------------------


def viewers_part(cfg):
    """A WebSocket viewer per job (autobahn on asyncio), in a process of its own, subscribed to the job's topic
    as its page is, until SIGTERM: how many have subscribed (cfg["status"], as they do), then [arrival ms, lag
    ms] of every printed line that reached them (cfg["out"]). Imports no Django (Daphne's Twisted would claim
    autobahn)."""
    from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

    port, arrived, state, seqs = cfg["port"], [], {"subscribed": 0, "closed": 0}, {}

    class Viewer(WebSocketClientProtocol):
        def onMessage(self, payload, is_binary):
            now = now_ms()
            ev = json.loads(payload)
            if ev.get("kind") == "subscribed":
                state["subscribed"] += 1
            elif ev.get("kind") == "output":
                mine = seqs.setdefault(ev["topic"], set())
                for seq, stream, text in ev["data"]["lines"]:
                    if stream == "stdout" and text.startswith("ln ") and seq not in mine:
                        mine.add(seq)
                        arrived.append([now, now - float(text.split(" ", 3)[2])])

        def onClose(self, was_clean, code, reason):
            state["closed"] += 1

    async def run():
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        for job_id in cfg["jobs"]:
            factory = WebSocketClientFactory(f"ws://127.0.0.1:{port}/ws/live?topics=job.{job_id}",
                                             origin=f"http://127.0.0.1:{port}", headers={"Cookie": cfg["cookie"]})
            factory.protocol = Viewer
            factory.setProtocolOptions(openHandshakeTimeout=60)
            await loop.create_connection(factory, "127.0.0.1", port)
        while not stop.is_set():
            write_json(cfg["status"], state)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
        write_json(cfg["out"], {**state, "lines": arrived, "received": sum(map(len, seqs.values()))})

    asyncio.run(run())


def write_json(path, data):
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return default


def proc_cpu(pid, children=False):
    """CPU seconds of process `pid` alone, or (children) of the live processes under it."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) if children else [root]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def snapshot(parts):
    import psutil
    from django.conf import settings
    from django.db import connection

    from bench.load import _busy_s, cpu_s, postgres_pids
    from yardstick.embedded import EmbeddedRedis

    with connection.cursor() as cur:
        cur.execute("SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, sessions FROM pg_stat_database "
                    "WHERE datname = current_database()")
        commits, inserted, updated, deleted, sessions = cur.fetchone()
        cur.execute("SELECT pg_total_relation_size('launch_outputline'), (SELECT count(*) FROM launch_outputline), "
                    "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8")
        table_bytes, lines, wal = cur.fetchone()
    redis = EmbeddedRedis(settings.DATA_DIR).pid() if settings.EMBEDDED_REDIS else None
    web = psutil.Process(parts.pid("web"))
    return {"at": time.time(), "web_cpu": proc_cpu(parts.pid("web")), "web_rss": web.memory_info().rss,
            "worker_cpu": proc_cpu(parts.pid("worker")), "commands_cpu": proc_cpu(parts.pid("worker"), children=True),
            "postgres_cpu": cpu_s(postgres_pids()[:1]), "redis_cpu": proc_cpu(redis) if redis else 0.0,
            "viewers_cpu": proc_cpu(parts.pid("viewers")) if "viewers" in parts.procs else 0.0,
            "machine": _busy_s(psutil.cpu_times()),
            "commits": commits, "sessions": sessions, "rows": inserted + updated + deleted, "inserted": inserted, "table_bytes": table_bytes,
            "lines": lines, "wal": wal}


def measure_fleet(base, token, cookie, parts, jobs, rate, duration):
    """(d) once: `jobs` printers at `rate` (gated until every one runs and is watched), a window of
    `duration` s from 1 s after the gate; snapshots at its ends, the viewers' counts."""
    from django.conf import settings

    ids = [launch(base, token, PRINTER, rate=rate, seconds=duration + 3, gate=1)[0] for _ in range(jobs)]
    wait(lambda: running_with_pid(ids), 120, f"{jobs} printers running", parts, every_s=0.2)
    status, out = (Path(settings.DATA_DIR) / f"bench-launch-viewers.{k}.json" for k in ("status", "out"))
    for path in (status, out):
        path.unlink(missing_ok=True)
    config = {"port": int(base.rsplit(":", 1)[1]), "cookie": cookie, "jobs": ids, "status": str(status),
              "out": str(out)}
    parts.start("viewers", [sys.executable, __file__, "--viewers-part", json.dumps(config)], os.environ)
    wait(lambda: read_json(status, {}).get("subscribed", 0) >= jobs, 60, f"{jobs} viewers subscribed", parts)
    rss_before, dropped_before = snapshot(parts)["web_rss"], dropped_events()
    open_gate(ids)
    time.sleep(1.0)
    start = snapshot(parts)
    time.sleep(duration)
    end = snapshot(parts)
    wait_ended(ids, duration + 60, parts)
    time.sleep(0.5)
    parts.stop(["viewers"])
    dropped = dropped_events() - dropped_before
    seen = read_json(out, {"lines": [], "closed": 0, "subscribed": 0, "received": 0})
    window = (start["at"] * 1000, end["at"] * 1000)
    seen["lags"] = [lag for at, lag in seen.pop("lines") if window[0] <= at < window[1]]
    return {"start": start, "end": end, "rss_before": rss_before, "viewers": seen, "jobs": jobs, "rate": rate,
            "ids": ids, "read": read_lags(ids, start["at"], end["at"]), "load": os.getloadavg()[0], "dropped": dropped}


def dropped_events():
    """Events the channel layer has dropped so far: channels_redis logs each group_send that found a receiving
    process's channel full (its capacity, 100 by default, is shared by every socket of that Daphne)."""
    from django.conf import settings

    path = Path(settings.DATA_DIR) / "bench-launch-worker.log"
    return path.read_text(errors="replace").count("channels over capacity in group") if path.exists() else 0


def read_lags(ids, start, end):
    """(lines printed in all, p50 and p99 ms from printed to read by the worker over [start, end))."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM launch_outputline WHERE job_id = ANY(%s) AND stream = 'stdout'", [ids])
        printed = cur.fetchone()[0]
        cur.execute("""
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag)
            FROM (SELECT extract(epoch FROM at) * 1000 - split_part(text, ' ', 3)::float8 AS lag
                  FROM launch_outputline WHERE job_id = ANY(%s) AND stream = 'stdout' AND text LIKE 'ln %%'
                  AND at >= to_timestamp(%s) AND at < to_timestamp(%s)) t""", [ids, start, end])
        p50, p99 = cur.fetchone()
    return {"printed": printed, "p50": p50, "p99": p99}


# -- (e): on a Ray cluster -------------------------------------------------------------------------------------

RAY_CLUSTER = "bench-ray"
STEPS_RAY = "bench-steps-ray"
STEPS_NODE = "bench-steps-node"
STEPS_ARGV = ["{python}", "{yardstick}/tests/launch/steps_script.py", "--out", "{job_dir}", "--steps", "200",
              "--sleep", "0.2", "--ignore-stop"]
STEPS_GRACE_S = [2, 3]
RAY_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
FOLLOWER_PARTS = ("beat", "default-worker")


def start_follower(parts, base):
    """Beat and a default-queue worker, with the argv `up` gives them (yardstick/runner.py), reporting to our
    Daphne: beat sends launch.tasks.follow_clusters every settings.LAUNCH_FOLLOW_S, the worker runs it (and the
    follow_remote each launch on a cluster sends) among the rest of the upkeep. Wait for its first pass done."""
    from django.conf import settings

    from yardstick.runner import children_for

    purge("default")
    for child in children_for(settings, ["worker", "beat"], "127.0.0.1", int(base.rsplit(":", 1)[1])):
        name = "default-worker" if child.name == "worker" else child.name
        parts.start(name, child.argv, child_env(YARDSTICK_URL=base, **child.env))
    log = Path(settings.DATA_DIR) / "bench-launch-default-worker.log"

    def passed():
        text = log.read_text(errors="replace") if log.exists() else ""
        return "launch.tasks.follow_clusters" in text and "succeeded" in text

    wait(passed, 120, "the default worker's first follower pass from beat", parts, every_s=0.2)


def define_steps_recipes(admin, address, shared):
    """The Ray cluster (this bench's head) and the steps recipe twice: on it (executor ray, its job folders under
    `shared`), and on a node (no executor: the bench's launch worker)."""
    from launch.models import Cluster, Recipe

    Cluster.register({"name": RAY_CLUSTER, "address": address, "python": sys.executable,
                      "description": "bench/launched_jobs.py's own local Ray head"}, admin)
    steps = {"description": "tests/launch/steps_script.py: 200 steps of 0.2 s, ends only at a signal "
                            "(bench/launched_jobs.py)",
             "argv": STEPS_ARGV, "devices": {"kind": "cpu", "count": 1}, "stop_grace_s": STEPS_GRACE_S}
    Recipe.define(STEPS_RAY, {**steps, "executor": "ray", "cluster": RAY_CLUSTER, "shared_dir": str(shared)}, admin)
    Recipe.define(STEPS_NODE, steps, admin)


def ray_status(client, job_id):
    """What Ray says of the job's first start (its JobStatus name), None before it was submitted."""
    try:
        status = client.get_job_status(f"yardstick-job-{job_id}-1")
    except Exception:  # noqa: BLE001 - a 404 until the follower submits it
        return None
    return str(getattr(status, "value", status))


def post_stop(base, token, job_id):
    """POST /api/jobs/<id>/stop (what the page's Stop button does, through the API); ms just before it."""
    req = urllib.request.Request(f"{base}/api/jobs/{job_id}/stop", data=b"", method="POST",
                                 headers={"Authorization": f"Bearer {token}"})
    t0 = now_ms()
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()
    return t0


def steps_round(base, token, page, parts, recipe, client=None):
    """One launch of a steps recipe watched from its page (with `client`, the Ray head's, one on Ray): POST ->
    Ray says RUNNING and Yardstick has it so (Launch.remote_status), -> the first step on the reward chart (as
    in (b)); then Stop -> Yardstick sets the stop flag, sends SIGTERM (stop_step), Ray says STOPPED, the job is
    stopped (Job.finished_at) and 'stopped' is on the page. ms from the POST, and from the Stop."""
    from launch.models import Launch
    from trainer.models import Job

    up = {}

    def tick(job_id):
        if client is None:
            return
        if "ray_running" not in up and ray_status(client, job_id) in ("RUNNING", *RAY_ENDED):
            up["ray_running"] = now_ms()
        if "running" not in up and Launch.objects.filter(pk=job_id, remote_status="RUNNING").exists():
            up["running"] = now_ms()

    seen, t0, job_id = first_lines(base, token, page, parts, recipe, {}, timeout_s=180, chart=True, tick=tick)
    if client is not None:
        wait(lambda: tick(job_id) or len(up) == 2, 60, f"Ray job of job {job_id} running", parts)
    down = {}
    stop_at = post_stop(base, token, job_id)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        parts.check()
        if client is not None:
            if "sigterm" not in down and Launch.objects.filter(pk=job_id, stop_step="SIGTERM").exists():
                down["sigterm"] = now_ms()
            if "ray_stopped" not in down and ray_status(client, job_id) in RAY_ENDED:
                down["ray_stopped"] = now_ms()
        if page.evaluate("window.__bench.stoppedAt > 0") and (client is None or "ray_stopped" in down):
            break
        page.wait_for_timeout(50)
    after = seen_on_page(page)
    wait_ended([job_id], 60, parts)
    job = Job.objects.get(pk=job_id)
    row = Launch.objects.get(pk=job_id)
    db = round_breakdown(job_id, t0)
    return {"ray": client is not None, "job": job_id, "status": job.status, "remote_status": row.remote_status, "stop_step": row.stop_step,
           "claimed": db["claimed"], "logged": db["logged"], "step": db["step"],
           "chart": _at(seen.get("chartAt"), t0), "steps_done": job.steps_done,
           "ray_running": _at(up.get("ray_running"), t0), "running": _at(up.get("running"), t0),
           "flag": row.stop_flag_at.timestamp() * 1000 - stop_at if row.stop_flag_at else None,
           "sigterm": _at(down.get("sigterm"), stop_at), "ray_stopped": _at(down.get("ray_stopped"), stop_at),
           "stopped": job.finished_at.timestamp() * 1000 - stop_at if job.finished_at else None,
           "on_page": _at(after.get("stoppedAt"), stop_at)}


def describe_steps_round(r):
    out = [f"claimed {_ms(r['claimed'])}"]
    if r["ray"]:
        out.append(f"Ray says RUNNING {_ms(r['ray_running'])}, Yardstick has it {_ms(r['running'])}")
    out.append(f"step {r['step']} logged {_ms(r['logged'])}, on the chart {_ms(r['chart'])}")
    stop = [f"stop flag {_ms(r['flag'])}", f"SIGTERM {_ms(r['sigterm'])}", f"Ray STOPPED {_ms(r['ray_stopped'])}"]
    out.append("Stop -> " + ", ".join((stop if r["ray"] else []) + [f"stopped {_ms(r['stopped'])}",
                                                                     f"on the page {_ms(r['on_page'])}"]))
    ray = f", Ray {r['remote_status']}, {r['stop_step']}" if r["ray"] else ""
    return "; ".join(out) + f" ({r['status']} at step {r['steps_done']}{ray})"


def measure_ray(base, token, cookie_name, cookie_value, parts, admin, rounds):
    """(e): a Ray head of the bench's own, beat and a default-queue worker; `rounds` of the steps recipe on Ray
    and on this node's launch worker, alternating, the job page open for each."""
    from tests.ray_head import RayHead

    began = time.monotonic()
    head, shared = RayHead(), tempfile.mkdtemp(prefix="bench-launch-shared-")
    try:
        head.start()
        head_s = time.monotonic() - began
        define_steps_recipes(admin, head.address, shared)
        start_follower(parts, base)
        print(f"  Ray head at {head.address} up in {head_s:.0f} s; beat and the default worker following "
              f"({time.monotonic() - began:.0f} s)", flush=True)
        client = head.client()
        ray, node = [], []
        with browser_page(base, cookie_name, cookie_value) as page:
            page.goto(f"{base}/")
            for i in range(rounds):
                ray.append(steps_round(base, token, page, parts, STEPS_RAY, client))
                print(f"  Ray round {i + 1}: {describe_steps_round(ray[-1])}", flush=True)
                node.append(steps_round(base, token, page, parts, STEPS_NODE))
                print(f"  node round {i + 1}: {describe_steps_round(node[-1])}", flush=True)
    finally:
        parts.stop(FOLLOWER_PARTS)
        head.close()
        shutil.rmtree(shared, ignore_errors=True)
    return {"ray": ray, "node": node, "head_s": head_s}



# -- the report ------------------------------------------------------------------------------------------------


def report_launches(trl, printer, device):
    where = "dom" if all(s.get("panel") for s, _t0, _db in trl + printer) else "ev"
    shown = ("visible in the job page's output panel" if where == "dom" else
             "its 'output' event on the page's socket (no output panel on the job page)")
    print(f"\n(a) launch -> first output line, {shown}; the page is opened right after the POST")
    live = [_at(s.get("liveAt"), t0) for s, t0, _ in trl + printer]
    print(f"  page opened and live:                           {p50_p90([v for v in live if v is not None])}")

    def column(rounds, key):
        return [v for v in (_at(s["firstLine"].get(key), t0) for s, t0, _ in rounds) if v is not None]

    trl_any, trl_cmd = column(trl, f"{where}:any"), column(trl, f"{where}:cmd")
    pr_any, pr_cmd = column(printer, f"{where}:any"), column(printer, f"{where}:cmd")
    print(f"  launch -> Yardstick's 'started on ...' line, TRL:    {p50_p90(trl_any)}")
    print(f"  launch -> Yardstick's 'started on ...' line, printer: {p50_p90(pr_any)}")
    print(f"  launch -> first output line on page, TRL ({device}):  {p50_p90(trl_cmd)}")
    print(f"  launch -> first output line on page, printer (ref): {p50_p90(pr_cmd)}")
    if trl_cmd and pr_cmd:
        print(f"  ratio TRL / printer: {statistics.median(trl_cmd) / statistics.median(pr_cmd):.2f} x "
              "(the rest is the TRL script's start: Python, torch, transformers, trl imports)")
    read = [db["read"] for _s, _t0, db in trl if db["read"] is not None]
    if read and trl_cmd:
        print(f"  TRL: its first line read by the worker {p50_p90(read)}; on the page "
              f"{statistics.median(trl_cmd) - statistics.median(read):,.0f} ms later (p50)")

    print("\n(b) launch -> first step on the reward chart (TRL, tiny model, 1 step)")
    chart = [_at(s.get("chartAt"), t0) for s, t0, _ in trl]
    chart = [v for v in chart if v is not None]
    event = [v for v in (_at(s.get("rewardEv"), t0) for s, t0, _ in trl) if v is not None]
    logged = [db["logged"] for _s, _t0, db in trl if db["logged"] is not None]
    steps = sorted({db["step"] for _s, _t0, db in trl if db["step"] is not None})
    print(f"  launch -> step {','.join(map(str, steps)) or '?'} logged by the run (MLflow timestamp): {p50_p90(logged)}")
    print(f"  launch -> its 'step' event on the page's socket:        {p50_p90(event)}")
    print(f"  launch -> first step on the job page's reward chart:    {p50_p90(chart)}")
    if chart and logged:
        live_path = [s.get("chartAt") - t0 - db["logged"] for s, t0, db in trl
                     if db["logged"] is not None and (s.get("chartAt") or 0) > 0]
        print(f"  ratio on the chart / logged by the run: {statistics.median(chart) / statistics.median(logged):.3f} x; "
              f"the live path (logged -> drawn) {p50_p90(live_path)}")


def report_rates(results, seconds):
    panel = all(r["dom"] is not None for r in results)
    print(f"\n(c) one printer, {seconds:g} s at each rate, its page open: lines/s read by the worker, arriving on the "
          "page's socket ('output' events)"
          + (" and shown in the output panel (the animation frame after they are in #output-lines)" if panel else
             "; no output panel on the job page, so the socket's figures are the page's")
          + "; each from the first line printed to the last one's arrival; lag = arrival - printed")
    kept = []
    for r in results:
        rate, n = r["rate"], r["n"]
        stages = [("worker read", r["worker"]), ("page socket", r["ev"])] + ([("on screen", r["dom"])] if panel else [])
        printed = _rate(r["worker"], printed=True) or _rate(r["ev"], printed=True)
        print(f"  {rate:>7,.0f} lines/s asked, {printed or 0:,.0f} printed ({n:,} lines):")
        for name, got in stages:
            if not got or not got["n"]:
                print(f"    {name:<12} no line")
                continue
            arrived = _rate(got)
            print(f"    {name:<12} {arrived or 0:8,.0f} lines/s = {(arrived or 0) / printed:.2f} x printed; "
                  f"{got['n']:,}/{n:,} lines; lag p50 {pct(got['lags'], 0.5):,.0f} ms, max {max(got['lags']):,.0f} "
                  f"ms, at the end {got['lastLag']:,.0f} ms")
        last = stages[-1][1]
        if last and last["n"] >= n and last["lastLag"] < 2000:
            kept.append(rate)
    print(f"  the page keeps up (every line, the last within 2 s of being printed) at: "
          f"{', '.join(f'{r:,.0f}' for r in kept) or 'none of these'} lines/s")


def _rate(got, printed=False):
    """Lines/s of a bucket: printed, from the first line printed to the last; else as they reached that stage,
    from the first line printed to the last one's arrival (so a stage that falls behind shows it)."""
    if not got or got["n"] < 2:
        return None
    span = ((got["lastPrinted"] if printed else got["lastAt"]) - got["firstPrinted"]) / 1000
    return (got["n"] - 1) / span if span > 0 else None


def report_fleet(load, ref, web_rss_start):
    def rates(run):
        s, e = run["start"], run["end"]
        span = e["at"] - s["at"]
        per = {k: (e[k] - s[k]) / span for k in ("web_cpu", "worker_cpu", "commands_cpu", "postgres_cpu",
                                                  "redis_cpu", "viewers_cpu", "machine", "commits", "sessions", "rows",
                                                  "inserted", "lines", "table_bytes", "wal")}
        per["span"] = span
        return per

    a, b = rates(load), rates(ref)
    offered = load["jobs"] * load["rate"]
    print(f"\n(d) {load['jobs']} printers at {load['rate']:g} lines/s each ({offered:,.0f} lines/s offered), a "
          f"{a['span']:.0f} s window, each watched by a WebSocket viewer; reference: the same {ref['jobs']} jobs "
          f"printing nothing ({b['span']:.0f} s); {os.cpu_count()} cores")

    def ratio(x, y):
        return f"{x / y:,.1f} x" if y * 100 > abs(x) else "> 100 x (reference ~0)"

    for name, key, unit in (("web (Daphne) CPU", "web_cpu", "cores"), ("launch worker CPU", "worker_cpu", "cores"),
                            ("the commands + guards CPU", "commands_cpu", "cores"),
                            ("PostgreSQL CPU", "postgres_cpu", "cores"), ("Redis CPU", "redis_cpu", "cores"),
                            ("viewers CPU", "viewers_cpu", "cores"),
                            ("machine busy (all users)", "machine", "cores"),
                            ("commits (xact_commit)", "commits", "/s"),
                            ("new connections (sessions)", "sessions", "/s"),
                            ("rows written (ins+upd+del)", "rows", "/s"),
                            ("output lines stored", "lines", "/s")):
        print(f"  {name:<28} {a[key]:9,.2f} {unit:<5}  reference {b[key]:9,.2f} {unit:<5}  = {ratio(a[key], b[key])}")
    rss = [r / 2**20 for r in (load["end"]["web_rss"], load["rss_before"], ref["end"]["web_rss"], web_rss_start)]
    print(f"  web RSS                      {rss[0]:9,.0f} MiB at the end; before its gate {rss[1]:,.0f} MiB, at the "
          f"reference's end {rss[2]:,.0f} MiB, when Daphne first answered {rss[3]:,.0f} MiB")
    lines = max(a["lines"], 1e-9)
    print(f"  launch_outputline            {a['table_bytes'] / 2**20:9,.2f} MiB/s = {a['table_bytes'] / lines:,.0f} "
          f"bytes/line on disk (table + indexes + TOAST; lines of 80 characters); WAL {a['wal'] / lines:,.0f} "
          f"bytes/line; {load['end']['table_bytes'] / 2**20:,.1f} MiB at the end")
    print(f"  per 1,000 lines              web {a['web_cpu'] / max(a['lines'], 1e-9) * 1000 * 1000:,.1f} ms CPU, worker "
          f"{a['worker_cpu'] / max(a['lines'], 1e-9) * 1000 * 1000:,.1f} ms, PostgreSQL "
          f"{a['postgres_cpu'] / max(a['lines'], 1e-9) * 1000 * 1000:,.1f} ms; "
          f"{a['commits'] / max(a['lines'], 1e-9) * 1000:,.1f} commits, {a['rows'] / max(a['lines'], 1e-9) * 1000:,.0f} rows")
    read = load["read"]
    print(f"  printed -> read by the worker      lag p50 {_ms(read['p50'])}, p99 {_ms(read['p99'])} (OutputLine.at)")
    viewers = load["viewers"]
    lag = viewers["lags"]
    got = len(lag) / a["span"]
    print(f"  printed -> at the viewers    {got:9,.0f} lines/s in the window = {got / offered:.2f} x offered; lag p50 "
          f"{_ms(pct(lag, 0.5))}, p99 {_ms(pct(lag, 0.99))}, max {_ms(max(lag) if lag else None)}; "
          f"{viewers['received']:,} of the {read['printed']:,} lines printed reached them in all"
          + (f"; {viewers['closed']} sockets closed early" if viewers["closed"] > viewers["subscribed"] else ""))
    print(f"  output events dropped        {load['dropped']:,} of the worker's sends found the web process's channel "
          f"full (channels_redis capacity); reference {ref['dropped']:,}")
    print(f"  load average at the end      {load['load']:.1f} ({os.cpu_count()} cores; other users' processes included)")

def report_ray(e):
    from django.conf import settings

    if "error" in e:
        print(f"\n(e) on a Ray cluster: not measured: {e['error']}")
        return
    ray, node = e["ray"], e["node"]
    print(f"\n(e) a steps recipe (tests/launch/steps_script.py, 200 steps of 0.2 s, ends only at a signal, stop_grace_s "
          f"{STEPS_GRACE_S}) on a local Ray head of 2 CPUs (up in {e['head_s']:.0f} s), followed by celery beat every "
          f"LAUNCH_FOLLOW_S = {settings.LAUNCH_FOLLOW_S:g} s and a default-queue worker; reference: the same recipe on "
          f"this node's launch worker; {len(ray)} rounds of each, alternating, the job page open")

    def col(rows, key):
        return [r[key] for r in rows if r[key] is not None]

    def ratio(key):
        a, b = col(ray, key), col(node, key)
        if a and b and statistics.median(b) > 0:
            print(f"  ratio Ray / node: {statistics.median(a) / statistics.median(b):.2f} x")

    print(f"  POST -> claimed, Ray (follow_remote submits it):       {p50_p90(col(ray, 'claimed'))}")
    print(f"  POST -> claimed, node (the launch worker starts it):   {p50_p90(col(node, 'claimed'))}")
    print(f"  POST -> Ray says RUNNING (its Jobs API):               {p50_p90(col(ray, 'ray_running'))}")
    print(f"  POST -> Yardstick has it RUNNING (remote_status):      {p50_p90(col(ray, 'running'))}")
    print(f"  POST -> first step logged by the run, Ray (MLflow):    {p50_p90(col(ray, 'logged'))}")
    print(f"  POST -> first step logged by the run, node (MLflow):   {p50_p90(col(node, 'logged'))}")
    print(f"  POST -> first step on the reward chart, Ray:           {p50_p90(col(ray, 'chart'))}")
    print(f"  POST -> first step on the reward chart, node (ref):    {p50_p90(col(node, 'chart'))}")
    ratio("chart")
    print(f"  Stop -> the run's stop flag set (stop_flag_at), Ray:   {p50_p90(col(ray, 'flag'))}")
    print(f"  Stop -> SIGTERM sent (stop_step), Ray:                 {p50_p90(col(ray, 'sigterm'))}")
    grace = [r["sigterm"] - r["flag"] for r in ray if r["sigterm"] is not None and r["flag"] is not None]
    print(f"  stop flag -> SIGTERM, Ray (the first grace: {STEPS_GRACE_S[0]} s):".ljust(57) + p50_p90(grace))
    print(f"  Stop -> Ray says STOPPED:                              {p50_p90(col(ray, 'ray_stopped'))}")
    print(f"  Stop -> the job stopped (Job.finished_at), Ray:        {p50_p90(col(ray, 'stopped'))}")
    print(f"  Stop -> the job stopped (Job.finished_at), node:       {p50_p90(col(node, 'stopped'))}")
    print(f"  Stop -> 'stopped' on the job page, Ray:                {p50_p90(col(ray, 'on_page'))}")
    print(f"  Stop -> 'stopped' on the job page, node (ref):         {p50_p90(col(node, 'on_page'))}")
    ratio("on_page")
    print(f"  (a run that ignores its stop flag ends at SIGTERM, {STEPS_GRACE_S[0]} s after it, on both; on Ray the "
          "follower sees the Stop at its next pass, sends SIGTERM at the first pass the grace has passed by and sees "
          "STOPPED at the one after)")
    odd = [r for r in ray + node if r["status"] != "stopped"]
    if odd:
        print(f"  note: {len(odd)} round(s) did not end stopped: " + ", ".join(f"job {r['job']} {r['status']}"
                                                                         for r in odd))


# -- main ------------------------------------------------------------------------------------------------------


def _positive(kind, minimum):
    def parse(text):
        value = kind(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return value
    return parse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=_positive(int, 1), default=3,
                        help="launches of the TRL recipe, and of the printer, for (a) and (b) (default 3)")
    parser.add_argument("--jobs", type=_positive(int, 1), default=20, help="printers at once for (d) (default 20)")
    parser.add_argument("--rate", type=_positive(float, 0), default=100.0,
                        help="lines/s each printer of (d) prints (default 100)")
    parser.add_argument("--duration", type=_positive(float, 5), default=30.0,
                        help="seconds measured in (d), and in its reference (default 30)")
    parser.add_argument("--rates", default="100,1000,2500,5000,10000", help="lines/s of (c), comma-separated")
    parser.add_argument("--viewers-part", help=argparse.SUPPRESS)
    parser.add_argument("--rate-seconds", type=_positive(float, 1), default=5.0,
                        help="seconds one printer of (c) prints at each rate (default 5)")
    parser.add_argument("--no-ray", action="store_true", help="skip (e), the steps recipe on a local Ray head")
    parser.add_argument("--ray-rounds", type=_positive(int, 1), default=3,
                        help="launches of the steps recipe on Ray, and on the node, for (e) (default 3)")
    args = parser.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if args.jobs > CONCURRENCY:
        parser.error(f"--jobs: the launch worker runs at most {CONCURRENCY} at once")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.viewers_part:
        viewers_part(json.loads(args.viewers_part))
        return
    import django
    import psutil

    django.setup()
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API keeps an event loop in this thread
    from django.db import connection

    from yardstick.services import embedded_services_for_command

    began = time.monotonic()
    parts = Parts()
    with embedded_services_for_command(redis=True), tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        try:
            use_bench_database()
            admin, token, cookie_name, cookie_value = prepare_users()
            models_root = Path(tmp) / "models"
            save_tiny_model(models_root)
            base, worker = start_parts(parts)
            web_rss_start = psutil.Process(parts.pid("web")).memory_info().rss
            device = define_recipes(admin, models_root, worker)
            print(f"Daphne at {base}, {worker} (--pool threads --concurrency {CONCURRENCY}); TRL on {device} "
                  f"({time.monotonic() - began:.0f} s)", flush=True)
            with browser_page(base, cookie_name, cookie_value) as page:
                trl, printer = measure_launches(base, token, page, parts, args.rounds)
                rates = measure_rates(base, token, page, parts, args.rates, args.rate_seconds)
            print(f"  ({time.monotonic() - began:.0f} s) the fleet: reference, then load", flush=True)
            cookie = f"{cookie_name}={cookie_value}"
            ref = measure_fleet(base, token, cookie, parts, args.jobs, 0, args.duration)
            load = measure_fleet(base, token, cookie, parts, args.jobs, args.rate, args.duration)
            on_ray = None
            if not args.no_ray:
                print(f"  ({time.monotonic() - began:.0f} s) (e): a Ray head, beat, the default worker", flush=True)
                try:
                    on_ray = measure_ray(base, token, cookie_name, cookie_value, parts, admin, args.ray_rounds)
                except (Exception, SystemExit) as err:  # noqa: BLE001 - (a)-(d) are reported still
                    on_ray = {"error": f"{type(err).__name__}: {err}"}
        finally:
            parts.stop()
            connection.close()
    print(f"\nlaunch bench ({time.monotonic() - began:.0f} s; {os.cpu_count()} cores; every process on this machine)")
    report_launches(trl, printer, device)
    report_rates(rates, args.rate_seconds)
    report_fleet(load, ref, web_rss_start)
    if on_ray is not None:
        report_ray(on_ray)
        if "error" in on_ray:
            raise SystemExit(1)


if __name__ == "__main__":
    main()

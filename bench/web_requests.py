"""Requests a second: 20 clients alternating the fleet page and /api/fleet on a fleet of one device.

    python bench/web_requests.py [--clients 20] [--duration 60] [--reference-s 15] [--profile FILE]
                             [--data-dir var/bench-requests]

Daphne runs exactly as `up` starts it (yardstick.runner.children_for, the web
child) against an embedded PostgreSQL and Redis of this benchmark's own under
--data-dir (its telemetry and costs emptied each run; DATABASE_URL and
REDIS_URL are ignored), filled with one node of one
simulated device (6 h of 1 Hz samples, their rollups and attribution, its
newest sample kept fresh every second as a collector would) and a logged-in
viewer. `--clients` clients, each one keep-alive connection with the viewer's
session cookie, send GET / and GET /api/fleet in turn, one request at a time,
for `--duration` seconds. Prints the requests served, p50/p99 per URL, errors,
and the web process's CPU per request; then the same clients for
`--reference-s` on each of two references measured in the same run: a static
file (the floor of the stack: Daphne, Django's ASGI handler, WhiteNoise) and
/api/whoami (the smallest authenticated view: session, user, role). The
machine's load average is printed with the figures. Never fails on speed.

--profile FILE samples the web process through the fleet window with py-spy
(the threads holding the GIL, i.e. its CPU; FILE gets the collapsed stacks) and
prints the frames that took the most of it.
"""

import argparse
import asyncio
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VIEWER = "bench-requests"
GOAL_REQUESTS, GOAL_P50_MS = 8000, 150  # issue 29: what the same probe got a month earlier, over 60 s
STATIC = "/static/yardstick/dashboard.js"
MARK = "bench-requests.mark"  # in a data dir this benchmark made (it empties that database's telemetry)


def load_average():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` (and its reaped children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def fill():
    """One node of one simulated device: 6 h of 1 Hz samples, rolled up and attributed; prices; the viewer."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection
    from django.utils import timezone as djtz

    from collector import store
    from collector.agent import schema
    from collector.tasks import roll_up
    from costs.prices import install_examples
    from costs.tasks import attribute

    now = djtz.now().replace(microsecond=0)
    first = now - timedelta(hours=6)
    with connection.cursor() as cur:
        cur.execute("TRUNCATE telemetry_sample, telemetry_latest, telemetry_rollup_1m, telemetry_rollup_1h, "
                    "telemetry_rollup_pending, collector_device, collector_node, costs_allocation "
                    "RESTART IDENTITY CASCADE")
        cur.execute("INSERT INTO collector_node (name, labels, interval_s) VALUES ('bench-0', '{}', 1)")
        cur.execute("INSERT INTO collector_device (uuid, node_id, index, model, source, simulated, mem_total_mib) "
                    "VALUES ('GPU-bench-0', 1, 0, 'NVIDIA H100 80GB HBM3 (sim)', 'sim', true, 81559)")
        schema.ensure_partitions(cur, schema.days_between(first.date(), now.date()))
        cur.execute(
            "INSERT INTO telemetry_sample (device_id, ts, util_pct, mem_util_pct, power_w, energy_j, mem_used_mib, "
            "mem_total_mib, temp_c, sm_clock_mhz, sm_active_pct) "
            "SELECT 1, %s + make_interval(secs => s), s %% 100, 30, 200 + s %% 400, s * 400.0, 20000, 81559, 55, "
            "1800, 40 FROM generate_series(0, %s) s", [first, int((now - first).total_seconds())])
        cur.execute("INSERT INTO telemetry_latest SELECT * FROM telemetry_sample WHERE device_id = 1 AND ts = %s",
                    [now])
        cur.execute("INSERT INTO telemetry_rollup_pending (device_id, hour, from_ts) SELECT 1, h, greatest(h, %s) "
                    "FROM generate_series(date_trunc('hour', %s::timestamptz), %s, interval '1 hour') h "
                    "ON CONFLICT DO NOTHING", [first, first, now])
    store.create_partitions()
    roll_up()
    install_examples()
    attribute()  # leaves today's totals in the cache, as the worker's task does every minute
    user, _ = get_user_model().objects.get_or_create(username=VIEWER)
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    return user


class Fresh(threading.Thread):
    """Moves the device's newest sample to now every second, as its collector would."""

    def __init__(self):
        super().__init__(name="fresh", daemon=True)
        self.stop = threading.Event()

    def run(self):
        import psycopg
        from django.db import connection

        from collector.management.commands.collect import settings_dsn

        with psycopg.connect(settings_dsn(connection.settings_dict), autocommit=True) as conn:
            while not self.stop.wait(1.0):
                conn.execute("UPDATE telemetry_latest SET ts = now()")


async def _get(reader, writer, request):
    """One request on a keep-alive connection: (status, body bytes)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        body = await reader.read()
    return status, body


async def _client(port, cookie, paths, deadline, times, errors):
    request = {p: (f"GET {p} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n"
                   "Accept: text/html,application/json\r\nConnection: keep-alive\r\n\r\n").encode() for p in paths}
    conn = None
    k = 0
    while time.monotonic() < deadline:
        path = paths[k % len(paths)]
        k += 1
        started = time.perf_counter()
        try:
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", port)
            status, _ = await _get(*conn, request[path])
            if status != 200:
                errors[f"{path} {status}"] = errors.get(f"{path} {status}", 0) + 1
        except (OSError, asyncio.IncompleteReadError, ValueError) as err:
            errors[f"{path} {type(err).__name__}"] = errors.get(f"{path} {type(err).__name__}", 0) + 1
            if conn is not None:
                conn[1].close()
            conn = None
            continue
        times[path].append((time.perf_counter() - started) * 1000)
    if conn is not None:
        conn[1].close()


def drive(port, cookie, paths, clients, seconds):
    """`clients` clients sending `paths` in turn for `seconds`: ({path: [ms, ...]}, {error: count})."""
    times, errors = {p: [] for p in paths}, {}

    async def main():
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(_client(port, cookie, paths[i % len(paths):] + paths[:i % len(paths)], deadline,
                                       times, errors) for i in range(clients)))

    asyncio.run(main())
    return times, errors


def py_spy(pid, seconds, out):
    """Start py-spy sampling `pid` for `seconds` (threads holding the GIL) into `out`, collapsed stacks."""
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if exe is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "100",
                             "--gil", "--format", "raw", "--output", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)


def hot_frames(path, top=40):
    """[(share of samples, frame)] of the frames on the most sampled stacks, each counted once a stack."""
    total, frames = 0, collections.Counter()
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for frame in {re.sub(r":\d+\)$", ")", f) for f in stack.split(";")}:
            frames[frame] += int(count)
    return [(n / total, f) for f, n in frames.most_common(top)] if total else []


def pct(values, q):
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds on the fleet page and /api/fleet")
    parser.add_argument("--reference-s", type=float, default=15.0, help="seconds on each reference")
    parser.add_argument("--profile", type=Path, help="py-spy's samples of the web process in the fleet window here")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "var" / "bench-requests",
                        help="its own embedded PostgreSQL and Redis (default var/bench-requests)")
    args = parser.parse_args()
    data_dir = args.data_dir.resolve()
    if data_dir.exists() and any(data_dir.iterdir()) and not (data_dir / MARK).exists():
        raise SystemExit(f"--data-dir {args.data_dir}: refused, it holds files that no run of this benchmark made "
                         f"(no {MARK} in it); name a new folder or one an earlier run used")
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARK).touch()
    # This run's own servers, never the machine's: set before Django reads its settings (the web child inherits it).
    os.environ["YARDSTICK_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "yardstick.settings"
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client

    from bench.live_latency import free_port, wait_http
    from yardstick.runner import children_for
    from yardstick.services import embedded_services_for_command

    with embedded_services_for_command():
        call_command("migrate", interactive=False, verbosity=0)
        user = fill()
        client = Client()
        client.force_login(user)
        cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        fresh = Fresh()
        fresh.start()
        port = free_port()
        argv = children_for(settings, ["web"], "127.0.0.1", port)[0].argv
        log = open(settings.DATA_DIR / "bench-requests-web.log", "w")
        web = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz")
            drive(port, cookie, ["/", "/api/fleet", STATIC, "/api/whoami"], args.clients, 3)  # warm up
            runs = {}
            for name, paths, seconds in (("fleet", ["/", "/api/fleet"], args.duration),
                                         ("static", [STATIC], args.reference_s),
                                         ("whoami", ["/api/whoami"], args.reference_s)):
                load_before, cpu_before = load_average(), cpu_seconds(web.pid)
                spy = py_spy(web.pid, seconds - 2, args.profile) if args.profile and name == "fleet" else None
                times, errors = drive(port, cookie, paths, args.clients, seconds)
                if spy is not None:
                    spy.wait(timeout=60)
                runs[name] = {"times": times, "errors": errors, "seconds": seconds, "load": load_before,
                              "load_after": load_average(), "cpu": cpu_seconds(web.pid) - cpu_before}
        finally:
            fresh.stop.set()
            web.terminate()
            web.wait(timeout=20)
            log.close()

    print(f"\n{args.clients} clients, one device, Daphne as `up` runs it; load average (1, 5, 15 min) "
          f"before / after each window")
    rates = {}
    for name, run in runs.items():
        served = sum(len(v) for v in run["times"].values())
        rates[name] = served / run["seconds"]
        every = [t for v in run["times"].values() for t in v]
        print(f"  {name:<7} {served:7,} requests in {run['seconds']:.0f} s = {rates[name]:6.1f}/s, "
              f"p50 {pct(every, 50):6.1f} ms, web CPU {1000 * run['cpu'] / max(1, served):5.2f} ms/request, "
              f"errors {sum(run['errors'].values())}   (load {run['load']} / {run['load_after']})")
        for path, values in run["times"].items():
            if values and len(run["times"]) > 1:
                print(f"    {path:<12} {len(values):7,}   p50 {pct(values, 50):6.1f} ms, p99 {pct(values, 99):6.1f} ms")
        for what, count in sorted(run["errors"].items()):
            print(f"    error: {what} x {count}")
    if args.profile:
        print(f"\nweb process CPU in the fleet window, by frame (py-spy --gil, {args.profile}):")
        for share, frame in hot_frames(args.profile):
            print(f"  {100 * share:5.1f}%  {frame}")
    fleet = runs["fleet"]
    served = sum(len(v) for v in fleet["times"].values()) * 60 / fleet["seconds"]
    p50 = pct([t for v in fleet["times"].values() for t in v], 50)
    print(f"fleet + /api/fleet: {served:,.0f} requests per 60 s = {served / GOAL_REQUESTS:.2f} x goal "
          f"({GOAL_REQUESTS:,}), p50 {p50:.0f} ms = {p50 / GOAL_P50_MS:.2f} x goal ({GOAL_P50_MS} ms); "
          f"{rates['fleet'] / rates['static']:.2f} x the static file's rate, "
          f"{rates['fleet'] / rates['whoami']:.2f} x /api/whoami's")


if __name__ == "__main__":
    main()

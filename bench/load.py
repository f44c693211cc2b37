"""Load: a simulated fleet writing 10,000 samples/s while 50 viewers watch the fleet page live.

    python bench/load.py [--duration 600] [--agents 10] [--gpus-per-agent 1000] [--hz 1] [--viewers 50]
                         [--web-processes 1] [--data-dir var/bench-load] [--ws-max-message-mb N]
                         [--fold-minutes N]

Everything runs on this machine, against an embedded PostgreSQL and Redis of
its own under --data-dir (its database re-created each run; DATABASE_URL and
REDIS_URL are ignored), as processes of their own:

- agents: --agents processes, each the real collector agent (sampling thread,
  delivery thread, binary COPY through collector/agent/writer.py, spool) over
  a `sim` source of --gpus-per-agent GPUs, 8 a node, --hz ticks a second (default 1);
- web: Daphne with the arguments `up` gives it (yardstick.runner.children_for);
  --ws-max-message-mb sets its WebSocket message limit (`up` sets 32 MiB;
  Daphne's own default, 1 MiB, a fleet event of some 4,000 devices outgrows);
- viewers: --viewers logged-in viewers of the fleet page: one real Chromium
  (Debian's, through Playwright) and the rest WebSocket clients (autobahn on
  asyncio) that subscribe as fleet.js does (`/ws/live?topics=fleet,costs`)
  and open again after a close as dashboard.js does;
- upkeep: the roll-up and attribution tasks (collector.tasks.roll_up,
  costs.tasks.attribute) every 60 s as beat schedules them, from the first
  sample on, and once more when the window ends; 3/4 of the GPUs are held by
  running jobs of 64 GPUs, so attribution has jobs to charge.

The window (--duration) starts once every device has a sample and every
viewer has been live. Measured over it:

- ingest lag: sample timestamp -> the row visible to another connection (one
  device of each agent, read every 20 ms: a figure is late by up to one read);
- sample -> frame: sample timestamp -> the WebSocket frame that carries it, at
  each WebSocket viewer, for every device of every fleet frame;
- sample -> screen: the same in Chromium, at the animation frame after the
  charts redrew (plotly_afterplot) following the page's own handlers;
- the fleet page's cold load in Chromium, on the page's own clock from
  navigation: its first byte, the socket open (the page says live), the
  heatmap first drawn, the load event, and when each script arrived;
- memory (RSS, and PSS, which counts a page that processes share once) of the
  web server and of every PostgreSQL process, before the load, at the start
  and at the end; CPU seconds per second of each part and of the machine;
- database growth per sample and per rollup and allocation row, WAL per
  sample, and what a day of this fleet takes on disk, with the retention;
- roll-up and attribution run times;
- with --fold-minutes N: N allocation minutes past the horizon written before
  the window, folded halfway through it as beat's costs.tasks.fold would (a
  minute of batches at most): each batch's time, and the ingest lag and
  attribution runs while it ran against the rest of the window.

Ratios against references of the same run: the achieved ingest rate against
the offered one (agents x GPUs a second), latencies against the 1 s goal,
task times against their 60 s period. Never fails on speed; stops every
process it started on the way out.
"""

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOAL_MS = 1000
WS_MAX_MESSAGE_BYTES = 32 * 2**20  # yardstick.runner's, which `up` gives Daphne
GPUS_PER_NODE = 8
JOB_GPUS = 64  # GPUs a job holds
HELD_SHARE = 0.75  # of the fleet held by running jobs
UPKEEP_EVERY_S = 60.0  # beat's period for collector-roll-up and costs-attribute
PROBE_EVERY_S = 0.02
STATUS_EVERY_S = 2.0
PROGRESS_EVERY_S = 10.0
READY_TIMEOUT_S = 240.0
VIEWER_STAGGER_S = 0.2  # between two viewers opening the page
LATE_MAX_S = 120.0  # after the window, how long its last samples may take to reach the viewers and still count
VIEWER = "load-viewer"
STATE = "load"  # the data dir's folder for the parts' logs, status files and spools, emptied at each start
TOPICS = "fleet,costs"  # what the fleet page follows (views.fleet_page)


# -- the parts, each a process of its own ------------------------------------------------------------


class FleetSlice:
    """Agent `index`'s share of the simulated fleet: a `sim` source whose node names carry the agent's
    index (SimSource names its nodes sim-node-NN whatever the seed, and two agents must not share one)."""

    name = "sim"

    def __init__(self, index, gpus):
        from collector.agent.sources.sim import SimSource

        self.index = index
        self.sim = SimSource(nodes=max(1, gpus // GPUS_PER_NODE), gpus=min(gpus, GPUS_PER_NODE), seed=index)
        self._renamed = {}  # id(the sim's DeviceInfo) -> ours: the same objects every tick

    def read(self, ts):
        readings = self.sim.read(ts)
        for r in readings:
            ours = self._renamed.get(id(r.device))
            if ours is None:
                ours = self._renamed[id(r.device)] = replace(r.device, node=f"a{self.index:02d}-{r.device.node}")
            r.device = ours
        return readings

    def devices(self):
        return [r.device for r in self.read(datetime.now(timezone.utc))]

    def close(self):
        self.sim.close()


def write_json(path, data):
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return default


def read_window(path):
    """[start, end) of the measured window, in seconds since the epoch, as the orchestrator last wrote it
    (infinite bounds until it has: nothing before the window counts)."""
    data = read_json(path, {})
    return [data.get("start") or float("inf"), data.get("end") or float("inf")]


def on_sigterm():
    """An Event set by SIGTERM (and SIGINT): how the orchestrator asks a part to finish."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def agent_part(cfg):
    """The real collector agent over its slice of the fleet, until SIGTERM; its counters in cfg["status"]."""
    from collector.agent.cli import configure_logging
    from collector.agent.runner import Agent
    from collector.agent.spool import Spool

    configure_logging(sys.stderr)
    # Each agent stands for nodes of its own: its own phase (the CLI's is the node's name).
    agent = Agent(FleetSlice(cfg["index"], cfg["gpus"]), cfg["dsn"], Spool(cfg["spool"]), interval_s=1.0 / cfg["hz"],
                  labels={"team": f"team{cfg['index'] % 4}"}, phase_key=f"a{cfg['index']:02d}")
    stop = on_sigterm()

    def status(final=False):
        write_json(cfg["status"], {"ticks": agent.ticks, "samples_written": agent.samples_written,
                                   "writes_abandoned": agent.writes_abandoned, "final": final})

    def report():
        while not stop.wait(STATUS_EVERY_S):
            status()

    threading.Thread(target=report, daemon=True).start()
    agent.run(stop)
    status(final=True)


class Histogram(collections.Counter):
    """Latencies in whole milliseconds -> how many samples had them."""

    def add(self, ms, n=1):
        self[round(ms)] += n

    def percentile(self, q):
        """The nearest-rank q-quantile (0..1), or None when empty."""
        total = sum(self.values())
        if not total:
            return None
        rank, seen = q * (total - 1), 0
        for value in sorted(self):
            seen += self[value]
            if seen > rank:
                return value

    def summary(self):
        return {"n": sum(self.values()), "p50": self.percentile(0.5), "p99": self.percentile(0.99),
                "max": max(self) if self else None}

    @classmethod
    def of(cls, data):
        return cls({int(k): v for k, v in (data or {}).items()})


def frame_stamps(message):
    """(sample times, how many devices had each) of the devices a binary fleet frame carries, as numpy arrays of
    Unix seconds to 10 ms (dashboard/fleetstate.py's layout: header, bitmap for "D", util, state, pad, power,
    age). Vectorized: 49 viewers decode 5,000 devices twice a second in one process."""
    import struct

    import numpy as np

    (size,) = struct.unpack_from("<I", message, 4)
    header = json.loads(message[8:8 + size])
    offset, n, m = 8 + size, header["n"], header["m"]
    if message[3:4] == b"D":
        offset += (n + 7) // 8
    offset += 2 * m
    offset += offset % 2
    ages = np.frombuffer(message, "<u2", m, offset + 2 * m)
    centis, counts = np.unique(ages[ages < 65534], return_counts=True)
    stamps = header["now_ms"] / 1000 - centis / 100
    old = np.array(list(header.get("old_ages", {}).values()), dtype=float)
    return (np.concatenate([stamps, header["now_ms"] / 1000 - old]),
            np.concatenate([counts, np.ones(len(old), dtype=counts.dtype)]))


def viewers_part(cfg):
    """WebSocket viewers of the fleet page (autobahn on asyncio), each with its own session, until SIGTERM.

    They open one every VIEWER_STAGGER_S and, like dashboard.js, open again after a close, 1, 2, 4 ... 30 s
    later with jitter. Every fleet frame's devices carry the timestamp of their sample; each one's sample
    -> frame latency is the frame's arrival minus that timestamp. The device timestamps are picked out of
    the frame's text (the consumer's json.dumps writes `"ts": "...", "util_pct"` for each) rather than
    parsing all of it: decoding every copy of a frame of 10,000 devices would cost the viewers more CPU
    than the server spends on them."""
    import asyncio
    import random

    from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

    window = [float("inf"), float("inf")]  # what the orchestrator's window file says, once it says it
    hist = Histogram()
    counts = {"open": 0, "opened": 0, "failed_openings": 0, "dropped": 0, "close_codes": {}, "frames": 0,
              "window_frames": 0, "window_bytes": 0, "largest_frame": 0, "samples": 0}
    jitter = random.Random(0)

    class Viewer(WebSocketClientProtocol):
        viewing = False  # open, as far as the page knows

        def onOpen(self):
            self.viewing = True
            self.factory.retry, self.factory.opened = 0, True
            counts["open"] += 1
            counts["opened"] += 1

        def onMessage(self, payload, is_binary):
            now = time.time()
            counts["frames"] += 1
            in_window = window[0] <= now < window[1]
            counts["window_bytes"] += in_window * len(payload)
            if not is_binary:  # the layout and other topics' events: bytes, not samples
                return
            counts["window_frames"] += in_window
            counts["largest_frame"] = max(counts["largest_frame"], len(payload))
            stamps, ns = frame_stamps(payload)
            if len(stamps):
                self.factory.newest = max(self.factory.newest, float(stamps.max()))
            inside = (window[0] <= stamps) & (stamps < window[1])
            for stamp, n in zip(stamps[inside].tolist(), ns[inside].tolist()):
                hist.add((now - stamp) * 1000, n)
                counts["samples"] += n

        def onClose(self, was_clean, code, reason):
            if self.viewing:
                counts["open"] -= 1
                counts["dropped"] += 1
            else:
                counts["failed_openings"] += 1
            counts["close_codes"][str(code)] = counts["close_codes"].get(str(code), 0) + 1
            self.factory.reopen()

    class Tab(WebSocketClientFactory):
        """One viewer's page: its socket, opened again after every close as dashboard.js does."""

        protocol = Viewer

        def __init__(self, cookie):
            host, port = cfg["host"], cfg["port"]
            super().__init__(f"ws://{host}:{port}/ws/live?topics={TOPICS}", origin=f"http://{host}:{port}",
                             headers={"Cookie": cookie})
            # A browser gives a page's socket as long as the server takes to answer (autobahn: 5 s).
            self.setProtocolOptions(openHandshakeTimeout=60)
            self.retry, self.opened, self.newest = 0, False, 0.0

        async def open(self):
            try:
                await asyncio.get_running_loop().create_connection(self, cfg["host"], cfg["port"])
            except OSError:
                self.reopen()

        def reopen(self):
            delay = min(30.0, 2.0 ** self.retry) * jitter.uniform(0.75, 1.25)
            self.retry += 1
            asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(self.open()))

    tabs = []

    def status(final=False):
        # every_opened: each viewer has been live once; newest: the oldest of the viewers' newest samples
        write_json(cfg["status"], {**counts, "every_opened": all(t.opened for t in tabs),
                                   "newest": min((t.newest for t in tabs), default=0.0),
                                   "latency": hist.summary(), "final": final})

    async def run():
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        tabs.extend(Tab(cookie) for cookie in cfg["cookies"])
        for tab in tabs:
            await tab.open()
            await asyncio.sleep(VIEWER_STAGGER_S)
        while not stop.is_set():
            window[:] = read_window(cfg["window"])
            status()
            try:
                await asyncio.wait_for(stop.wait(), STATUS_EVERY_S)
            except asyncio.TimeoutError:
                pass
        status(final=True)

    asyncio.run(run())


# Installed before the fleet page's scripts: the time each socket message arrives, and for every fleet
# event, after the page's own handlers ran, each device's sample -> arrival and sample -> drawn latency.
# Drawn: the animation frame after the charts' plotly_afterplot (during the handlers when Plotly drew at
# once, else the next one).
RECORDER = """
(() => {
  const L = window.__load = {arrive: {}, drawn: {}, frames: 0, samples: 0, syncDraws: 0, lateDraws: 0, newest: 0, windowFrames: 0,
                             pending: [], handling: false, drewDuring: false, at: 0, window: [Infinity, Infinity]};
  const add = (hist, ms, n) => { const k = Math.round(ms); hist[k] = (hist[k] || 0) + n; };
  const drawn = (batches) => requestAnimationFrame(() => {
    const now = Date.now();
    batches.forEach((stamps) => stamps.forEach(([t, n]) => add(L.drawn, now - t, n)));
  });
  const Native = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    ws.addEventListener("open", () => { L.openedAt = L.openedAt || performance.now(); });
    ws.addEventListener("message", () => {
      L.at = Date.now(); L.handling = true; L.drewDuring = false;
      L.firstMessageAt = L.firstMessageAt || performance.now();
    });
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  ["CONNECTING", "OPEN", "CLOSING", "CLOSED"].forEach((k) => { window.WebSocket[k] = Native[k]; });
  const watch = () => document.querySelectorAll(".chart[data-fig]").forEach((el) => {
    if (el.__loadWatched || typeof el.on !== "function") return;
    el.__loadWatched = true;
    el.on("plotly_afterplot", () => {
      if (L.handling) { L.drewDuring = true; return; }
      if (L.pending.length) { L.lateDraws += 1; drawn(L.pending.splice(0)); }
    });
  });
  setInterval(watch, 50);
  document.addEventListener("yardstick:event", (e) => {
    const ev = e.detail, at = L.at;
    L.handling = false;
    watch();
    if (ev.topic !== "fleet" || ev.kind !== "frame") return;
    // The carried devices' sample times, from the frame's ages (dashboard/fleetstate.py's layout).
    const buf = ev.data, bytes = new Uint8Array(buf), size = new DataView(buf).getUint32(4, true);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + size)));
    let off = 8 + size + (bytes[3] === 68 ? (header.n + 7) >> 3 : 0) + 2 * header.m;
    if (off % 2) off += 1;
    const ages = new Uint16Array(buf.slice(off + 2 * header.m, off + 4 * header.m));
    const counts = {};
    ages.forEach((a) => { if (a < 65534) { const t = header.now_ms - a * 10; counts[t] = (counts[t] || 0) + 1; } });
    const all = Object.keys(counts).map((t) => [Number(t), counts[t]]);
    all.forEach(([t]) => { L.newest = Math.max(L.newest, t); });
    const stamps = all.filter(([t]) => L.window[0] <= t && t < L.window[1]);
    stamps.forEach(([t, n]) => { add(L.arrive, at - t, n); L.samples += n; });
    L.frames += 1;
    if (L.window[0] <= at && at < L.window[1]) L.windowFrames += 1;
    if (L.drewDuring) { L.syncDraws += 1; drawn([stamps]); } else L.pending.push(stamps);
  });
  // When the heatmap was first drawn (data-drawn set by fleet.js), on the page's clock.
  new MutationObserver((changes) => changes.forEach((c) => {
    if (L.heatmapAt === undefined && c.target.dataset.fig === "heatmap" && c.target.dataset.drawn === "true") L.heatmapAt = performance.now();
  })).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-drawn"]});
  // Where the page's first seconds went, in ms from navigation (the page's own clock).
  L.timing = () => {
    const nav = performance.getEntriesByType("navigation")[0] || {};
    const scripts = performance.getEntriesByType("resource").filter((r) => /\.js(\?|$)/.test(r.name))
      .map((r) => [r.name.split("/").pop().split("?")[0], Math.round(r.responseEnd), r.encodedBodySize]);
    return {ttfb: nav.responseStart, html: nav.responseEnd, html_bytes: nav.encodedBodySize, interactive: nav.domInteractive,
            dom_loaded: nav.domContentLoadedEventEnd, loaded: nav.loadEventEnd, socket_open: L.openedAt,
            first_message: L.firstMessageAt, heatmap: L.heatmapAt, scripts: scripts};
  };
  L.snapshot = () => ({frames: L.frames, windowFrames: L.windowFrames, samples: L.samples, syncDraws: L.syncDraws, lateDraws: L.lateDraws,
                       arrive: L.arrive, drawn: L.drawn, newest: L.newest / 1000,
                       state: (document.getElementById("live-state") || {}).dataset?.state});
})();
"""


def open_fleet(page, base):
    """Open the fleet page in `page` and return, once it is live and drew its heatmap, RECORDER's timing."""
    page.goto(base + "/", wait_until="commit")
    page.wait_for_selector('#live-state[data-state="live"]')
    page.wait_for_function("window.__load.firstMessageAt !== undefined && window.__load.heatmapAt !== undefined"
                           " && performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
    return page.evaluate("window.__load.timing()")


def browser_part(cfg):
    """One viewer in Debian's Chromium on the fleet page, until SIGTERM; what RECORDER saw in cfg["status"]."""
    from playwright.sync_api import sync_playwright

    from tests.browser import chromium_flags

    stop = on_sigterm()
    base = f"http://{cfg['host']}:{cfg['port']}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=cfg["chromium"], args=chromium_flags())
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.add_cookies([{"name": cfg["cookie_name"], "value": cfg["cookie_value"], "url": base}])
            context.add_init_script(RECORDER)
            page = context.new_page()
            page.set_default_timeout(READY_TIMEOUT_S * 1000)
            # On the page's own clock, from navigation: the load event (every script, plotly.js included),
            # the socket open (the page says "live"), the heatmap first drawn. Cold: the first visit; warm: a
            # third one in another tab of the same browser (scripts from its cache, compiled code cached too).
            timing = open_fleet(page, base)
            load_s, live_s = timing["loaded"] / 1000, timing["socket_open"] / 1000
            for _ in range(2):
                tab = context.new_page()
                tab.set_default_timeout(READY_TIMEOUT_S * 1000)
                warm = open_fleet(tab, base)
                tab.close()
            timing["warm"] = warm
            while True:
                page.evaluate("w => { window.__load.window = w; }", [t * 1000 for t in read_window(cfg["window"])])
                seen = page.evaluate("window.__load.snapshot()")
                final = stop.is_set()
                arrive, drawn = Histogram.of(seen.pop("arrive")), Histogram.of(seen.pop("drawn"))
                write_json(cfg["status"], {**seen, "load_s": load_s, "live_s": live_s, "timing": timing, "final": final,
                                           "arrive": arrive.summary(), "drawn": drawn.summary()})
                if final:
                    break
                page.wait_for_timeout(STATUS_EVERY_S * 1000)
        finally:
            browser.close()


def upkeep_part(cfg):
    """The periodic roll-up and attribution tasks, every UPKEEP_EVERY_S and once more on SIGTERM, as a
    beat-driven worker runs them; one JSON line per run in cfg["log"]."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
    import django

    django.setup()
    from collector.tasks import roll_up
    from costs.tasks import attribute

    stop = on_sigterm()
    next_at = time.monotonic() + UPKEEP_EVERY_S
    with open(cfg["log"], "a") as log:
        if cfg.get("fold"):
            threading.Thread(target=fold_in_window, args=(cfg, log, stop), daemon=True).start()
        while True:
            final = stop.wait(max(0.0, next_at - time.monotonic()))
            for name, task in (("roll_up", roll_up), ("attribute", attribute)):
                started, began = time.time(), time.perf_counter()
                result = task()
                seconds = time.perf_counter() - began
                if isinstance(result, dict):  # attribute's summary: its size, not its job ids
                    result = {"rows": result.get("rows"), "late_minutes": result.get("late_minutes"),
                              "jobs": len(result.get("jobs") or [])}
                log.write(json.dumps({"task": name, "started": started, "seconds": seconds, "result": result,
                                      "final": final}) + "\n")
                log.flush()
            if final or stop.is_set():
                return
            next_at = max(next_at + UPKEEP_EVERY_S, time.monotonic())


def fold_in_window(cfg, log, stop):
    """--fold-minutes: halfway through the window, what beat's costs.tasks.fold does (costs.fold.fold: the mark, then
    batches for up to its budget), each batch a JSON line {"task": "fold_batch", ...} in the upkeep log."""
    from django.db import connection

    from costs.fold import fold

    while not stop.wait(0.5):
        if time.time() >= read_window(cfg["window"])[0] + cfg["duration"] / 2:
            break
    else:
        return

    def logged(started, seconds, rows):
        log.write(json.dumps({"task": "fold_batch", "started": started, "seconds": seconds, "result": rows,
                              "final": False}) + "\n")
        log.flush()

    fold(stop=stop, each=logged)
    connection.close()


PARTS = {"agent": agent_part, "viewers": viewers_part, "browser": browser_part, "upkeep": upkeep_part}


# -- the orchestrator ----------------------------------------------------------------------------------


class Processes:
    """The processes of a run, each in its own session (so a signal reaches its children), with its output
    in the data dir's log folder; `stop` ends them by process group, SIGKILL after a grace period."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.procs = {}  # name -> (Popen, log file)

    def start(self, name, argv, env=None, pass_fds=()):
        out = open(self.log_dir / f"{name}.log", "w")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env or os.environ, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, pass_fds=pass_fds)
        self.procs[name] = (proc, out)
        return proc

    def part(self, name, kind, cfg):
        return self.start(name, [sys.executable, __file__, "--part", kind, "--config", json.dumps(cfg)])

    def pid(self, name):
        return self.procs[name][0].pid if name in self.procs else None

    def check(self):
        """Raise SystemExit naming a process that ended on its own, with the end of its log."""
        for name, (proc, _) in self.procs.items():
            if proc.poll() is not None:
                tail = (self.log_dir / f"{name}.log").read_text(errors="replace").strip().splitlines()[-15:]
                raise SystemExit(f"{name} ended early with status {proc.returncode}; the end of its log "
                                 f"({self.log_dir / (name + '.log')}):\n  " + "\n  ".join(tail))

    def stop(self, names=None, grace_s=30.0):
        names = [n for n in (names or list(self.procs)) if n in self.procs]
        for name in names:
            proc, _ = self.procs[name]
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for name in names:
            proc, out = self.procs.pop(name)
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"  {name} did not end within {grace_s:.0f} s of SIGTERM: killed", flush=True)
                _signal_group(proc, signal.SIGKILL)  # with what it started (a Chromium, say)
                proc.wait()
            out.close()


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def wait_until(check, timeout_s, what, processes):
    deadline = time.monotonic() + timeout_s
    while not check():
        processes.check()
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.5)


def fresh_database():
    """Drop and re-create the data dir's database, migrate it, and make today's partitions; return its DSN."""
    import psycopg
    from django.core.management import call_command
    from django.db import connection

    from collector import store
    from collector.management.commands.collect import settings_dsn

    cfg = connection.settings_dict
    connection.close()
    with psycopg.connect(settings_dsn({**cfg, "NAME": "postgres"}), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{cfg["NAME"]}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{cfg["NAME"]}"')
    call_command("migrate", interactive=False, verbosity=0)
    store.create_partitions()
    return settings_dsn(cfg)


def prepare(slices, viewers):
    """The viewer login and one session cookie per viewer; running jobs holding HELD_SHARE of the GPUs,
    JOB_GPUS each (stints name devices by UUID, so they exist before the agents register the devices)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client
    from django.utils import timezone as djtz

    from trainer.models import Job, Status, Stint

    user = get_user_model().objects.create_user(VIEWER)
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    cookies = []
    for _ in range(viewers):
        client = Client()
        client.force_login(user)
        cookies.append(client.cookies[settings.SESSION_COOKIE_NAME].value)
    devices = [d for s in slices for d in s.devices()]
    now = djtz.now()
    held = devices[: int(len(devices) * HELD_SHARE) // JOB_GPUS * JOB_GPUS]
    stints = []
    for k in range(0, len(held), JOB_GPUS):
        job = Job.objects.create(name=f"load {k // JOB_GPUS}", team=f"team{k // JOB_GPUS % 4}", env="arithmetic",
                                 config={}, status=Status.RUNNING, started_at=now)
        stints += [Stint(job=job, node=d.node, device=d.uuid, device_name=d.model, pid=1, started_at=now)
                   for d in held[k:k + JOB_GPUS]]
    Stint.objects.bulk_create(stints)
    return cookies, devices, len(held) // JOB_GPUS


class LagProbe(threading.Thread):
    """Reads the newest samples of one device of each agent every PROBE_EVERY_S on a connection of its own:
    each new row's ingest lag is the read's start minus the sample's timestamp (the row was not there at
    the read before). Counts samples stamped in [window[0], window[1])."""

    QUERY = "SELECT device_id, ts FROM telemetry_sample WHERE device_id = ANY(%s) AND ts > %s"

    def __init__(self, dsn, device_ids):
        super().__init__(name="lag-probe", daemon=True)
        self.dsn = dsn
        self.ids = list(device_ids)
        self.window = [float("inf"), float("inf")]
        self.hist = Histogram()
        self.lags = []  # (sample timestamp, lag ms) of the window's samples: split around a fold (--fold-minutes)
        self.stop = threading.Event()
        self.error = None

    def run(self):
        import psycopg

        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                last = dict.fromkeys(self.ids, datetime.now(timezone.utc))
                while not self.stop.wait(PROBE_EVERY_S):
                    sent = time.time()
                    for device_id, ts in conn.execute(self.QUERY, [self.ids, min(last.values())]).fetchall():
                        if ts <= last[device_id]:
                            continue
                        last[device_id] = ts
                        if self.window[0] <= ts.timestamp() < self.window[1]:
                            self.hist.add((sent - ts.timestamp()) * 1000)
                            self.lags.append((ts.timestamp(), (sent - ts.timestamp()) * 1000))
        except Exception as exc:  # noqa: BLE001 - reported with the figures, never a silent gap
            self.error = f"{type(exc).__name__}: {exc}"


_SIZES = """
SELECT (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('telemetry_sample') WHERE isleaf),
       pg_total_relation_size('telemetry_latest'), pg_total_relation_size('telemetry_rollup_1m'),
       pg_total_relation_size('telemetry_rollup_1h'), pg_total_relation_size('costs_allocation'),
       pg_database_size(current_database()), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8,
       (SELECT count(*) FROM telemetry_sample), (SELECT count(*) FROM telemetry_rollup_1m),
       (SELECT count(*) FROM telemetry_rollup_1h), (SELECT count(*) FROM costs_allocation),
       pg_total_relation_size('costs_usage_day'), (SELECT count(*) FROM costs_usage_day)
"""
_SIZE_NAMES = ("raw_bytes", "latest_bytes", "rollup_1m_bytes", "rollup_1h_bytes", "allocation_bytes", "db_bytes",
               "wal_bytes", "samples", "rollup_1m_rows", "rollup_1h_rows", "allocation_rows", "day_bytes",
               "day_rows")
TB = 1e12


def database_sizes(conn):
    """Bytes on disk (tables with their indexes) and rows of the telemetry and cost tables, the database's
    size and the WAL position, by the names of _SIZE_NAMES."""
    return dict(zip(_SIZE_NAMES, map(int, conn.execute(_SIZES).fetchone())))


def postgres_pids():
    """The postmaster and every process it started (backends, checkpointer, autovacuum, WAL writer ...)."""
    import psutil
    from django.conf import settings

    from yardstick.embedded import EmbeddedPostgres

    pid = EmbeddedPostgres(settings.DATA_DIR, port=settings.PG_PORT).pid()
    if pid is None:
        return []
    try:
        return [pid] + [p.pid for p in psutil.Process(pid).children()]
    except psutil.Error:
        return [pid]


def memory(pids):
    """(RSS, PSS) in bytes summed over `pids`; PSS splits each shared page among the processes sharing it,
    so the PostgreSQL processes' shared buffers count once, not once per backend."""
    import psutil

    rss = pss = 0
    for pid in filter(None, pids):
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.Error:
            continue
        rss, pss = rss + info.rss, pss + info.pss
    return rss, pss


def cpu_s(pids):
    """CPU seconds of the processes `pids`, everything under them and their children that have ended."""
    import psutil

    total = 0.0
    for pid in filter(None, pids):
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
    return total


class Run:
    """One load run: its processes, where they report, and the snapshots it takes of them."""

    def __init__(self, args, data_dir):
        self.args = args
        self.state = data_dir / STATE
        self.window = self.state / "window.json"
        if self.state.exists():
            shutil.rmtree(self.state)
        self.state.mkdir(parents=True)
        self.processes = Processes(self.state)
        self.gpus = args.agents * args.gpus_per_agent
        self.offered = self.gpus * args.hz  # one sample per GPU per tick
        self.chromium = (os.environ.get("CHROMIUM") or shutil.which("chromium-headless-shell") or shutil.which("chromium")
                         or shutil.which("chromium-browser"))
        self.browsers = 1 if args.viewers and self.chromium else 0
        self.sockets = args.viewers - self.browsers
        self.port = None

    # -- starting the parts

    def start_web(self):
        """Daphne with the argv `up` gives it (plus --ws-max-message-mb when asked); wait until it answers."""
        from django.conf import settings

        from bench.live_latency import free_port, wait_http
        from yardstick.runner import children_for, listening_socket

        self.port = free_port()
        many = self.args.web_processes > 1
        self.listener = listening_socket("127.0.0.1", self.port) if many else None
        children = children_for(settings, ["web"], "127.0.0.1", self.port, self.args.web_processes,
                                self.listener and self.listener.fileno())
        for child in children:
            argv = child.argv
            if self.args.ws_max_message_mb:
                argv = argv[:-1] + ["--websocket-max-message-size", str(int(self.args.ws_max_message_mb * 2**20)),
                                    argv[-1]]
            self.processes.start(child.name, argv, pass_fds=child.pass_fds)
        self.web_names = [c.name for c in children]
        wait_http(f"http://127.0.0.1:{self.port}/healthz")

    def start_agents(self, dsn):
        for i in range(self.args.agents):
            self.processes.part(f"agent{i}", "agent", {"index": i, "gpus": self.args.gpus_per_agent, "hz": self.args.hz, "dsn": dsn,
                                                       "spool": str(self.state / f"spool{i}"),
                                                       "status": str(self.state / f"agent{i}.json")})

    def start_upkeep(self):
        self.processes.part("upkeep", "upkeep", {"log": str(self.state / "upkeep.jsonl"), "window": str(self.window),
                                                 "duration": self.args.duration, "fold": bool(self.args.fold_minutes)})

    def start_viewers(self, cookies):
        from django.conf import settings

        where = {"host": "127.0.0.1", "port": self.port, "window": str(self.window)}
        if self.sockets:
            self.processes.part("viewers", "viewers", {**where, "status": str(self.state / "viewers.json"),
                                                       "cookies": [f"{settings.SESSION_COOKIE_NAME}={c}"
                                                                   for c in cookies[:self.sockets]]})
        if self.browsers:
            self.processes.part("browser", "browser", {**where, "status": str(self.state / "browser.json"),
                                                       "chromium": self.chromium,
                                                       "cookie_name": settings.SESSION_COOKIE_NAME,
                                                       "cookie_value": cookies[-1]})

    def viewers_live(self):
        return ((not self.sockets or self.status("viewers").get("every_opened"))
                and (not self.browsers or self.status("browser").get("state") == "live"))

    def viewers_caught_up(self, end):
        """True once every viewer has had a sample stamped after `end`: all of the window that ever
        reaches them has (a frame carries each device's newest sample only). True at once when no fleet
        frame reached any of them in the window: there is nothing to wait for."""
        viewers, browser = self.status("viewers"), self.status("browser")
        if not viewers.get("window_frames") and not browser.get("windowFrames"):
            return True
        return all(status.get("newest", 0) >= end for status, n in
                   ((viewers, self.sockets), (browser, self.browsers)) if n)

    # -- reading them

    def status(self, name):
        return read_json(self.state / f"{name}.json", {})

    def agents_written(self):
        return sum(self.status(f"agent{i}").get("samples_written", 0) for i in range(self.args.agents))

    def upkeep_runs(self, since=0.0):
        path = self.state / "upkeep.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [run for run in map(json.loads, filter(None, lines)) if run["started"] >= since]

    def parts_cpu(self):
        p = self.processes
        return {
            "agents": cpu_s([p.pid(f"agent{i}") for i in range(self.args.agents)]),
            "postgres": cpu_s(postgres_pids()[:1]),
            "web": cpu_s([p.pid(name) for name in self.web_names]),
            "viewers": cpu_s([p.pid("viewers")]),
            "chromium": cpu_s([p.pid("browser")]),
            "upkeep": cpu_s([p.pid("upkeep")]),
            "bench": cpu_s([os.getpid()]) - cpu_s([p.pid(n) for n in p.procs]),
        }

    def snapshot(self, conn=None):
        """Time, memory of the web server and PostgreSQL, CPU seconds of each part and of the machine, and
        with `conn` the database's sizes and counts."""
        import psutil

        pg = postgres_pids()
        snap = {"at": time.time(), "web_mem": memory([self.processes.pid(name) for name in self.web_names]), "pg_mem": memory(pg),
                "pg_processes": len(pg), "cpu": self.parts_cpu(), "machine_busy_s": _busy_s(psutil.cpu_times())}
        if conn is not None:
            snap.update(database_sizes(conn))
        return snap


def _busy_s(t):
    return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)


def run_load(args):
    """Set up, run the window, wind down; print the figures."""
    import psycopg
    from django.conf import settings

    from collector.store import device_ids

    run = Run(args, settings.DATA_DIR)
    began = time.perf_counter()
    dsn = fresh_database()
    slices = [FleetSlice(i, args.gpus_per_agent) for i in range(args.agents)]
    cookies, devices, jobs = prepare(slices, args.viewers)
    print(f"fresh database, {jobs} running jobs of {JOB_GPUS} GPUs, {args.viewers} viewer sessions "
          f"({time.perf_counter() - began:.0f} s)", flush=True)
    probe = None
    try:
        run.start_web()
        conn = psycopg.connect(dsn, autocommit=True)
        before = run.snapshot()
        run.start_agents(dsn)
        run.start_upkeep()  # as beat would: rolling up from the first sample on
        reporting = lambda: conn.execute("SELECT count(*) FROM telemetry_latest").fetchone()[0]  # noqa: E731
        wait_until(lambda: reporting() >= len(devices), READY_TIMEOUT_S,
                   f"a first sample from each of the {len(devices):,} GPUs", run.processes)
        if args.fold_minutes:
            fill_past_minutes(conn, args.fold_minutes)
        probe = LagProbe(dsn, device_ids([s.devices()[0].uuid for s in slices]).values())
        probe.start()
        run.start_viewers(cookies)
        wait_until(run.viewers_live, READY_TIMEOUT_S, f"{args.viewers} viewers live on the fleet page", run.processes)
        print(f"{len(devices):,} GPUs reporting, {args.viewers} viewers live ({time.perf_counter() - began:.0f} s): "
              f"measuring for {args.duration:.0f} s", flush=True)
        start, end = measure(run, conn, probe)
        ended = wind_down(run, conn, probe, end["at"], start["at"])
        conn.close()
    finally:
        if probe is not None:
            probe.stop.set()
        run.processes.stop()
    report(run, before, start, end, ended, probe)


# --fold-minutes: idle allocation minutes of every device, from the first day past the horizon on, as attribution
# writes them (the day sums kept by its triggers)
_PAST_MINUTES = """
INSERT INTO costs_allocation (device_id, minute, job_id, team, held_s, device_s, energy_j, energy_from, energy_scope,
                              rollup_samples, rollup_covered_s, rollup_energy_j)
SELECT d.id, %(first)s::timestamptz + m * interval '1 minute', NULL, 'unassigned', 0, 60, 24000, 'counter', 'device',
       6, 60, 24000
FROM collector_device d CROSS JOIN generate_series(0, %(per_device)s - 1) m
"""


def fill_past_minutes(conn, minutes):
    """About `minutes` allocation minutes past the horizon, a share of each device, before the window."""
    from costs.fold import horizon, midnight

    began = time.perf_counter()
    devices = conn.execute("SELECT count(*) FROM collector_device").fetchone()[0]
    per_device = max(1, -(-minutes // devices))
    first = midnight(horizon()) - timedelta(minutes=per_device)  # all of them before the horizon's day
    conn.execute(_PAST_MINUTES, {"first": first, "per_device": per_device})
    conn.execute("VACUUM ANALYZE costs_allocation")
    print(f"{devices * per_device:,} allocation minutes past the horizon for the fold ({per_device} a device, from "
          f"{first:%Y-%m-%d}; {time.perf_counter() - began:.0f} s)", flush=True)


def measure(run, conn, probe):
    """The window: snapshots at its start and end, a progress line every PROGRESS_EVERY_S."""
    start = run.snapshot(conn)
    probe.window[0] = start["at"]
    write_json(run.window, {"start": start["at"]})
    written, at = run.agents_written(), time.monotonic()
    while (left := start["at"] + run.args.duration - time.time()) > 0:
        time.sleep(min(PROGRESS_EVERY_S, left))
        run.processes.check()
        now_written, now = run.agents_written(), time.monotonic()
        progress(run, start, probe, (now_written - written) / (now - at))
        written, at = now_written, now
    end = run.snapshot(conn)
    probe.window[1] = end["at"]
    write_json(run.window, {"start": start["at"], "end": end["at"]})
    return start, end


def wind_down(run, conn, probe, end, start):
    """Let the window's last samples reach the viewers, then stop the parts in turn, reading what each
    reported; the upkeep's last run rolls up and attributes the window's tail. Return the findings."""
    deadline = time.monotonic() + LATE_MAX_S
    while not run.viewers_caught_up(end) and time.monotonic() < deadline:
        time.sleep(STATUS_EVERY_S / 2)
    time.sleep(STATUS_EVERY_S + 0.5)  # their next status includes that sample
    late_s = time.time() - end
    run.processes.stop(["viewers", "browser"])
    found = {"viewers": run.status("viewers"), "browser": run.status("browser"), "late_s": late_s}
    run.processes.stop(["upkeep"], grace_s=600)
    found["after"] = database_sizes(conn)
    run.processes.stop([f"agent{i}" for i in range(run.args.agents)])
    time.sleep(5 * PROBE_EVERY_S)
    probe.stop.set()
    probe.join()
    found["agents"] = [run.status(f"agent{i}") for i in range(run.args.agents)]
    run.processes.stop(run.web_names)
    found["drops"] = [line.split("subscriber: ", 1)[-1] for name in run.web_names for line in
                      (run.state / f"{name}.log").read_text(errors="replace").splitlines()
                      if "dropping a live subscriber" in line]
    found["window_samples"] = conn.execute(
        "SELECT count(*) FROM telemetry_sample WHERE ts >= to_timestamp(%s) AND ts < to_timestamp(%s)",
        [start, end]).fetchone()[0]
    found["allocations_per_minute"] = conn.execute(
        "SELECT count(*)::float8 / nullif(count(DISTINCT (device_id, minute)), 0) FROM costs_allocation").fetchone()[0]
    found["day_rows_per_device_day"] = conn.execute(
        "SELECT count(*)::float8 / nullif(count(DISTINCT (device_id, day)), 0) FROM costs_usage_day").fetchone()[0]
    found["version"] = conn.execute("SHOW server_version").fetchone()[0]
    return found


def progress(run, start, probe, rate):
    lag = probe.hist.summary()
    viewers = run.status("viewers")
    frame = viewers.get("latency") or {}
    screen = run.status("browser").get("drawn") or {}
    upkeep = {r["task"]: r["seconds"] for r in run.upkeep_runs()}
    print(f"[{time.time() - start['at']:4.0f}/{run.args.duration:.0f} s] ingest {rate:6,.0f}/s; lag p50 "
          f"{_ms(lag['p50'])} p99 {_ms(lag['p99'])} | frame p50 {_ms(frame.get('p50'))} p99 {_ms(frame.get('p99'))}"
          f" ({viewers.get('open', 0)}/{run.sockets} open) | screen p50 {_ms(screen.get('p50'))} | web "
          f"{_mib(memory([run.processes.pid('web')])[0])} | roll_up {_s(upkeep.get('roll_up'))}, attribute "
          f"{_s(upkeep.get('attribute'))}", flush=True)


def _ms(value):
    return "-" if value is None else f"{value:,.0f} ms"


def _s(value):
    return "-" if value is None else f"{value:.1f} s"


def _mib(value):
    return f"{value / 2**20:,.0f} MiB"


def _size(value):
    if value is None:
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value / 1e3:,.0f} kB"


def _latency(name, summary, note=""):
    if not summary or not summary.get("n"):
        print(f"  {name:<32} no samples{note}")
        return
    print(f"  {name:<32} p50 {_ms(summary['p50']):>9}  p99 {_ms(summary['p99']):>9}  max {_ms(summary['max']):>9}"
          f"  = {summary['p50'] / GOAL_MS:.2f} / {summary['p99'] / GOAL_MS:.2f} x goal ({GOAL_MS} ms); "
          f"n = {summary['n']:,}{note}")


def report(run, before, start, end, found, probe):
    args, span = run.args, end["at"] - start["at"]
    print(f"\nLoad: {args.agents} agents x {args.gpus_per_agent:,} simulated GPUs at {args.hz:g} Hz = {run.offered:,.0f} "
          f"samples/s offered; {args.viewers} viewers of the fleet page ({run.sockets} WebSocket, {run.browsers} "
          f"Chromium); {args.web_processes} web process{'es' if args.web_processes > 1 else ''}; a {span:.0f} s window; "
          f"PostgreSQL {found['version']}; Daphne's WebSocket message limit "
          + (f"{args.ws_max_message_mb:g} MiB" if args.ws_max_message_mb else f"{WS_MAX_MESSAGE_BYTES / 2**20:g} MiB, as `up` runs it")
          + f"; {os.cpu_count()} cores, load average at the end {os.getloadavg()[0]:.1f}")
    report_ingest(run, span, found, probe)
    report_live(run, span, start, end, found)
    report_machine(run, span, before, start, end)
    report_database(run, start, end, found)
    report_upkeep(run, start)
    if args.fold_minutes:
        report_fold(run, start, probe)


def report_ingest(run, span, found, probe):
    print("ingest")
    stored, agents = found["window_samples"], found["agents"]
    print(f"  achieved                         {stored / span:8,.0f} samples/s = {stored / span / run.offered:.3f} x "
          f"offered ({run.offered:,.0f}/s): {stored:,} samples stamped in the window are stored")
    print(f"  agents                           {sum(a.get('ticks', 0) for a in agents) * run.args.gpus_per_agent:,} "
          f"sampled, {sum(a.get('samples_written', 0) for a in agents):,} written by their end, "
          f"{sum(a.get('writes_abandoned', 0) for a in agents)} writes abandoned"
          + ("" if all(a.get("final") for a in agents) else "; an agent did not report its end"))
    _latency("ingest lag (sample -> visible)", probe.hist.summary(),
             f"; read every {PROBE_EVERY_S * 1000:.0f} ms" + (f"; the reader failed: {probe.error}" if probe.error else ""))


def report_live(run, span, start, end, found):
    print(f"live (the window's samples counted until {found['late_s']:.0f} s after it)")
    viewers, browser = found["viewers"], found["browser"]
    if run.sockets:
        frames = viewers.get("window_frames", 0)
        _latency("sample -> WebSocket frame", viewers.get("latency"),
                 f"; {frames / run.sockets / span:.2f} fleet frames/s per viewer, {viewers.get('window_bytes', 0) / span / 2**20:.1f} "
                 f"MiB/s to all, largest frame {viewers.get('largest_frame', 0) / 2**20:.2f} MiB; each viewer got "
                 f"{viewers.get('samples', 0) / run.sockets / max(1, found['window_samples']):.0%} of the window's samples")
        print(f"  traffic                          {viewers.get('window_bytes', 0) / run.sockets / span / 1000:,.1f} KB/s per viewer "
              f"(every message of the fleet page's socket: layouts, frames, costs)")
        print(f"  viewers' sockets                 {viewers.get('opened', 0)} openings for {run.sockets} viewers, "
              f"{viewers.get('failed_openings', 0)} failed, {viewers.get('dropped', 0)} dropped after opening "
              f"(close codes {viewers.get('close_codes', {})}); {viewers.get('open', 0)} open at the end")
    if found["drops"]:
        print(f"  the web server dropped {len(found['drops'])} live subscribers; the first because: {found['drops'][0]}")
    if run.browsers:
        _latency("sample -> socket (Chromium)", browser.get("arrive"))
        _latency("sample -> screen (Chromium)", browser.get("drawn"),
                 f"; {browser.get('windowFrames', 0) / span:.2f} frames/s")
        t = browser.get("timing") or {}
        if t:
            ms = lambda k: "-" if t.get(k) is None else f"{t[k]:,.0f}"  # noqa: E731
            print(f"  fleet page (cold cache)          live after {t['socket_open'] / 1000:.2f} s, heatmap drawn after "
                  f"{t['heatmap'] / 1000:.2f} s, load event after {t['loaded'] / 1000:.2f} s (from navigation, the page's clock)")
            print(f"    ms from navigation             first byte {ms('ttfb')}, HTML {ms('html')} ({t.get('html_bytes', 0) / 1000:,.0f} KB), "
                  f"scripts run {ms('dom_loaded')}, socket open {ms('socket_open')}, first message {ms('first_message')}, "
                  f"heatmap {ms('heatmap')}, load {ms('loaded')}; scripts loaded at "
                  + ", ".join(f"{name} {at:,} ({size / 1000:,.0f} KB)" for name, at, size in t.get("scripts", [])))
            w = t.get("warm")
            if w:
                print(f"  fleet page (warm cache)          live after {w['socket_open'] / 1000:.2f} s, heatmap drawn after "
                      f"{w['heatmap'] / 1000:.2f} s, load event after {w['loaded'] / 1000:.2f} s (a third visit, "
                      f"another tab: scripts and their compiled code cached)")
    elif run.args.viewers:
        print("  sample -> screen                 not measured: no Chromium (set CHROMIUM=/path/to/chromium)")
    frames = viewers.get("window_frames", 0) + browser.get("windowFrames", 0)
    web_s = end["cpu"]["web"] - start["cpu"]["web"]
    if frames:
        print(f"  web CPU per fleet frame sent     {web_s / frames * 1000:.1f} ms (all its CPU in the window over "
              f"the {frames:,} fleet frames its viewers got)")


def report_machine(run, span, before, start, end):
    print(f"memory (RSS / PSS)                 {'before the load':>20} {'start':>20} {'end':>20}")
    for name, key in (("web (Daphne)", "web_mem"), (f"PostgreSQL ({end['pg_processes']} processes)", "pg_mem")):
        print(f"  {name:<32}" + "".join(f"{_mib(s[key][0]):>11} /{_mib(s[key][1]):>8}" for s in (before, start, end)))
    parts = {k: (end["cpu"][k] - start["cpu"][k]) / span for k in end["cpu"]}
    busy = (end["machine_busy_s"] - start["machine_busy_s"]) / span
    print(f"CPU over the window, cores busy ({os.cpu_count()} on this machine)")
    print("  " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
          + f"; the machine {busy:.2f}, of which other work {max(0.0, busy - sum(parts.values())):.2f}")


def report_database(run, start, end, found):
    from django.conf import settings

    from collector.store import retention

    after, per_minute = found["after"], found["allocations_per_minute"] or 1.0
    # A device's rows of a day: its jobs and idle, at least two (the window holds fewer changes than a day)
    per_device_day = max(2.0, found["day_rows_per_device_day"] or 0.0)
    grew = {k: end[k] - start[k] for k in _SIZE_NAMES}
    per_sample = grew["raw_bytes"] / max(1, grew["samples"])
    wal_per_sample = grew["wal_bytes"] / max(1, grew["samples"])
    # Rollups and allocations as the upkeep's last run (after the window) left them: bytes per row, None
    # while a table has none (a short window may end before a whole minute is attributed).
    m1_row, h1_row, alloc_row, day_row = (after[f"{k}_bytes"] / after[f"{k}_rows"] if after[f"{k}_rows"] else None
                                          for k in ("rollup_1m", "rollup_1h", "allocation", "day"))
    if run.args.fold_minutes:  # the folded rows' space stays in the table until autovacuum hands it to new minutes
        alloc_row = None
    per_day = {"1-min rollups": m1_row and run.gpus * 1440 * m1_row, "1-h": h1_row and run.gpus * 24 * h1_row,
               "allocations": alloc_row and run.gpus * 1440 * per_minute * alloc_row,
               "their day rows": day_row and run.gpus * per_device_day * day_row}
    print("database")
    if run.args.fold_minutes:
        print("  (allocation bytes/row are not measured in a run with --fold-minutes: the folded rows' space is in the "
              "table until autovacuum reuses it)")
    print(f"  raw samples                      {per_sample:.1f} bytes/sample (table + primary key) over "
          f"{grew['samples']:,} samples; WAL {wal_per_sample:.0f} bytes/sample (all that was written)")
    print(f"  rollups, allocations             1-min {_bytes_row(m1_row)} ({after['rollup_1m_rows']:,} rows), 1-h "
          f"{_bytes_row(h1_row)} ({after['rollup_1h_rows']:,}), allocations {_bytes_row(alloc_row)} "
          f"({after['allocation_rows']:,}, {per_minute:.2f} per device-minute), a day's sums {_bytes_row(day_row)} "
          f"({after['day_rows']:,}; {per_device_day:.2f} per device-day counted)")
    print(f"  telemetry_latest                 {_size(end['latest_bytes'])} for {run.gpus:,} rows; the database "
          f"{_size(start['db_bytes'])} at the start, {_size(after['db_bytes'])} at the end")
    samples_day = run.offered * 86400
    raw = samples_day * per_sample
    print(f"  a day of this fleet              {samples_day:,.0f} samples = {_size(raw)} raw; "
          + "; ".join(f"{name} {_size(size)}" for name, size in per_day.items())
          + f"; WAL {_size(samples_day * wal_per_sample)}")
    raw_days, m1_days, _ = retention()
    alloc_days = min(365, settings.ALLOCATION_1M_DAYS)
    m1, h1, alloc, days = per_day.values()
    year = {"raw": raw * raw_days, "1-min": m1 and m1 * m1_days, "1-h": h1 and h1 * 365,
            "allocations": alloc and days and alloc * alloc_days + days * 365}
    print(f"  held under the retention         raw {raw_days} d = {_size(year['raw'])}, 1-min {m1_days} d = "
          f"{_size(year['1-min'])}, 1-h kept for good = {_size(year['1-h'])} a year; allocations per minute "
          f"{alloc_days} d (YARDSTICK_ALLOCATION_1M_DAYS) = {_size(alloc and alloc * alloc_days)}, then folded into "
          f"their days, kept for good = {_size(days and days * 365)} a year")
    if all(year.values()):
        print(f"  a year of this fleet             {_size(sum(year.values()))} in all; allocations "
              f"{_size(year['allocations'])} (kept for good per minute, as before the fold: {_size(alloc * 365)}); "
              f"allocations under 1 TB a year with minutes kept {max(0, int((TB - days * 365) // alloc))} days at most")


def _bytes_row(value):
    return "- bytes/row" if value is None else f"{value:.0f} bytes/row"


def report_fold(run, start, probe):
    """--fold-minutes: the fold's batches halfway through the window, and ingest and attribution while they ran
    against the rest of the window (the reference, this run)."""
    from costs.fold import BUDGET_S

    runs = run.upkeep_runs(since=start["at"])
    batches = [r for r in runs if r["task"] == "fold_batch"]
    print("fold (beat's costs.tasks.fold halfway through the window: batches for up to "
          f"{BUDGET_S:.0f} s; the reference is the rest of the window)")
    if not batches:
        print("  no batch ran")
        return
    lo, hi = batches[0]["started"], max(b["started"] + b["seconds"] for b in batches)
    times = sorted(b["seconds"] for b in batches)
    rows = sum(b["result"] for b in batches)
    print(f"  batches                          {len(batches)}, {rows:,} minutes in {hi - lo:.1f} s = "
          f"{rows / (hi - lo):,.0f}/s; a batch (its locks held) median {times[len(times) // 2] * 1000:.0f} ms, "
          f"slowest {times[-1] * 1000:.0f} ms")
    beside = sorted(lag for ts, lag in probe.lags if lo <= ts < hi)
    alone = sorted(lag for ts, lag in probe.lags if not lo <= ts < hi)

    def pct(values, q):
        return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")

    print(f"  ingest lag beside the fold       p50 {pct(beside, 0.5):6.0f} ms  p99 {pct(beside, 0.99):6.0f} ms  "
          f"max {max(beside, default=float('nan')):6.0f} ms (n = {len(beside)}); the rest of the window p50 "
          f"{pct(alone, 0.5):.0f} ms, p99 {pct(alone, 0.99):.0f} ms, max {max(alone, default=float('nan')):.0f} ms "
          f"(n = {len(alone)})")
    attribute = [r for r in runs if r["task"] == "attribute"]
    overlapping = [r["seconds"] for r in attribute if r["started"] < hi and r["started"] + r["seconds"] > lo]
    others = [r["seconds"] for r in attribute if not (r["started"] < hi and r["started"] + r["seconds"] > lo)]
    print(f"  attribute beside the fold        {', '.join(f'{s:.1f} s' for s in overlapping) or 'no run'}; the others "
          f"{', '.join(f'{s:.1f} s' for s in others) or 'none'}")


def report_upkeep(run, start):
    print(f"upkeep (every {UPKEEP_EVERY_S:.0f} s, as beat runs it; the runs begun in the window and the last one)")
    runs = run.upkeep_runs(since=start["at"])
    for task in ("roll_up", "attribute"):
        mine = [r for r in runs if r["task"] == task]
        if not mine:
            print(f"  {task:<32} no run")
            continue
        times = sorted(r["seconds"] for r in mine)
        median = times[len(times) // 2]
        size = (f"{max(r['result'] for r in mine):,} (device, hour) pairs" if task == "roll_up"
                else f"{max(r['result']['rows'] for r in mine):,} allocation rows")
        print(f"  {task:<32} {len(times)} runs, median {median:.1f} s, max {times[-1]:.1f} s = {median / UPKEEP_EVERY_S:.2f}"
              f" / {times[-1] / UPKEEP_EVERY_S:.2f} of its period; at most {size} a run; each: "
              + ", ".join(f"{r['seconds']:.1f}" for r in mine))


# -- command line --------------------------------------------------------------------------------------


def _positive(kind, minimum):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {'whole ' if kind is int else ''}number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return value
    return parse


def _gpus_per_agent(text):
    value = _positive(int, 1)(text)
    if value > GPUS_PER_NODE and value % GPUS_PER_NODE:
        raise argparse.ArgumentTypeError(f"must be a multiple of {GPUS_PER_NODE} (GPUs a node), or at most "
                                         f"{GPUS_PER_NODE}, got {value}")
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=_positive(float, 10), default=600.0,
                        help="seconds measured, after every device reports and every viewer is live (default 600)")
    parser.add_argument("--agents", type=_positive(int, 1), default=10, help="agent processes (default 10)")
    parser.add_argument("--gpus-per-agent", type=_gpus_per_agent, default=1000,
                        help=f"simulated GPUs each agent reports, {GPUS_PER_NODE} a node (default 1000)")
    parser.add_argument("--web-processes", type=_positive(int, 1), default=1,
                        help="web servers on the one address, as `up --web-processes N` runs them (default 1)")
    parser.add_argument("--hz", type=_positive(float, 0.01), default=1.0,
                        help="samples per GPU a second, each agent's tick (default 1; 0.1 for 100,000 GPUs on one machine)")
    parser.add_argument("--viewers", type=_positive(int, 0), default=50,
                        help="viewers of the fleet page, one of them in Chromium (default 50)")
    parser.add_argument("--data-dir", default=str(ROOT / "var" / "bench-load"),
                        help="where its embedded PostgreSQL and Redis live; its database is re-created "
                             "(default var/bench-load)")
    parser.add_argument("--ws-max-message-mb", type=_positive(float, 1), default=None,
                        help="raise Daphne's WebSocket message limit to this many MiB (default: Daphne's own, "
                             "1 MiB, as `up` runs it)")
    parser.add_argument("--fold-minutes", type=_positive(int, 0), default=0,
                        help="write about this many allocation minutes past the horizon before the window, and fold "
                             "them halfway through it as beat would (costs.fold); reported beside the rest of the window")
    parser.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    args = parse_args(argv)
    if args.part:
        PARTS[args.part](json.loads(args.config))
        return
    with own_servers(args.data_dir, STATE, make_mark=False):
        signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: the finally blocks stop what was started
        run_load(args)


def own_servers(data_dir, mark, make_mark=True):
    """Django set up on a benchmark's own embedded PostgreSQL and Redis under `data_dir` (never the machine's:
    DATABASE_URL and REDIS_URL are ignored), as a context manager that stops them. A folder holding files but no
    `mark` folder is refused: its database is dropped and made again, never one that holds someone's data."""
    path = Path(data_dir).resolve()
    if path.exists() and any(path.iterdir()) and not (path / mark).is_dir():
        raise SystemExit(f"--data-dir {data_dir}: refused, it holds files that no run of this benchmark "
                         f"made (no {mark}/ folder in it); name a new folder or one an earlier run used")
    if make_mark:
        (path / mark).mkdir(parents=True, exist_ok=True)
    # Set before Django reads its settings.
    os.environ["YARDSTICK_DATA_DIR"] = str(path)
    os.environ["DJANGO_SETTINGS_MODULE"] = "yardstick.settings"
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from yardstick.services import embedded_services_for_command

    return embedded_services_for_command(redis=True)


if __name__ == "__main__":
    main()

"""The agent's reading of its node's serving deployments (docs/serving.md).

Every `every_s` seconds (YARDSTICK_SERVE_SCRAPE_S, default 10) the agent
lists the deployments registered on its node, fetches each one's metrics
page, reads it (engines.read) and counts what each model's counters gained
since the last reading (engines.delta: never negative; an engine restart
counts from zero again). The counts, and each page's outcome (read, or why
not), go into a Batch (`served`), through the agent's write path and spool
like a sample: a database outage or a control-plane restart loses no token.

The last reading of each deployment is kept in a file beside the spool, so an
agent restart counts what was served while it was down, once; the list of
deployments is kept there too, for a start while the database is away. A
page that cannot be read (refused, timed out, not Prometheus text, over
engines.MAX_BYTES) is reported on its deployment and breaks nothing else: the
next page is read all the same.

The GPUs a deployment holds: where its page is served on this machine, the
process listening on the page's port is the engine's server; each GPU whose
NVML process list (the agent's last tick) shows that process, or a process
it started (the holder's ancestors), is held by the deployment at that read.
Each read says so (`Served.pid`, `Served.devices`); a page on another
machine, or a listener this agent may not see (another user's, without
root), holds none.
"""

import ipaddress
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from urllib.parse import urlsplit

import psutil
import psycopg

from . import engines
from .batch import Served
from .sources.base import machine_addresses

log = logging.getLogger("collector.agent")

EVERY_S_DEFAULT = 10.0
FETCH_TIMEOUT_S = 5.0
MODEL_MAX = 500  # collector.models.ServedCount.model
ERROR_MAX = 2000  # collector.models.ScrapeTarget.unreadable
STATE_FILE = "serving-state.json"
_LIST = "SELECT name, engine, metrics_url, model FROM collector_scrapetarget WHERE node = %s ORDER BY name"


@dataclass(frozen=True)
class Target:
    """One deployment as the agent reads it."""

    name: str
    engine: str  # a key of engines.ENGINES, or "auto"
    metrics_url: str
    model: str  # "" for every model on its page


def fetch(url, timeout_s=FETCH_TIMEOUT_S):
    """The page's body (bytes, at most engines.MAX_BYTES + 1 of them), or engines.MetricsError saying why not."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4, */*;q=0.1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - an admin's http(s) URL
            return response.read(engines.MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise engines.MetricsError(f"the server answered HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        reason = getattr(e.reason, "strerror", None) or e.reason  # "Connection refused", not "[Errno 111] ..."
        raise engines.MetricsError(f"could not connect: {reason}") from None
    except TimeoutError:
        raise engines.MetricsError(f"no answer in {timeout_s:g} s") from None
    except OSError as e:  # a connection reset mid-body, ...
        raise engines.MetricsError(f"the connection failed: {e}") from None


class Scraper:
    """Reads the deployments of `node` whose rows it finds through `dsn`; `state_dir`: where its last readings are
    kept (the spool's directory)."""

    def __init__(self, node, dsn, state_dir, every_s=EVERY_S_DEFAULT, connect_timeout_s=3, fetch=fetch):
        self.node, self.dsn, self.every_s = node, dsn, every_s
        self.connect_timeout_s = connect_timeout_s
        self.fetch = fetch
        self._unlisted = None  # why the last listing failed, said once
        self.path = os.path.join(state_dir, STATE_FILE)
        self.targets, self.last = self._load()  # [Target]; {deployment: (its page's URL, {model: ModelReading})}

    def scrape(self, ts=None, holders=()):
        """Read every deployment of the node now; return a Batch-ready list of Served (one per deployment).
        `holders`: the last tick's ((device uuid, Holder), ...), the GPUs' processes."""
        ts = ts or datetime.now(timezone.utc)
        listed = self._list()
        if listed is not None:  # None: the database cannot say now, and the last list serves
            self.targets = listed
        listeners = _listeners() if self.targets else {}
        served = [self._read(target, ts, listeners, holders) for target in self.targets]
        known = {t.name for t in self.targets}
        self.last = {name: kept for name, kept in self.last.items() if name in known}
        return served

    def saved(self):
        """Keep the last readings on disk: called once what was counted from them is spooled or handed over."""
        state = {"targets": [asdict(t) for t in self.targets],
                 "last": {name: [url, {json.dumps(m): _reading_json(r) for m, r in models.items()}]
                          for name, (url, models) in self.last.items()}}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.path)

    def _read(self, target, ts, listeners=None, holders=()):
        started = time.monotonic()
        pid = _served_by(target.metrics_url, listeners or {})
        devices = tuple(sorted({uuid for uuid, h in holders if pid and (h.pid == pid or pid in h.ancestors)}))
        try:
            reading = engines.read(self.fetch(target.metrics_url), None if target.engine == "auto" else target.engine)
        except engines.MetricsError as e:
            return Served(target.name, ts, error=_cut(str(e)), pid=pid, devices=devices)
        models = {m: r for m, r in reading.models.items() if not target.model or m in (None, target.model)}
        if target.model and not models:
            names = ", ".join(sorted(str(m) for m in reading.models)) or "none"
            return Served(target.name, ts, engine=reading.engine,
                          error=_cut(f"the page counts no model {target.model!r}: it counts {names}"), pid=pid,
                          devices=devices)
        url, before = self.last.get(target.name, (None, {}))
        if url != target.metrics_url:  # registered again with another page: a first look at that one
            before = {}
        # A model's name as stored: at most MODEL_MAX characters (a label longer than any model's would otherwise
        # refuse the whole write, every deployment's counts with it).
        counted = tuple(((m or "")[:MODEL_MAX], _delta_fields(engines.delta(before.get(m), r), r))
                        for m, r in models.items())
        self.last[target.name] = (target.metrics_url, models)
        log.debug("read %s in %.2f s", target.name, time.monotonic() - started)
        return Served(target.name, ts, engine=reading.engine, models=counted, pid=pid, devices=devices)

    def _list(self):
        """The node's deployments, or None when the database cannot say now (the last list serves) or there is no
        database (`dsn` None: a benchmark gives its targets)."""
        if self.dsn is None:
            return None
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s) as conn:
                listed = [Target(*row) for row in conn.execute(_LIST, (self.node,))]
        except psycopg.Error as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if reason != self._unlisted:  # once per cause, not every few seconds of an outage
                log.warning("serving deployments not listed (%s); reading the last list: %s", reason,
                            ", ".join(t.name for t in self.targets) or "none")
            self._unlisted = reason
            return None
        self._unlisted = None
        return listed

    def _load(self):
        try:
            with open(self.path) as f:
                state = json.load(f)
            targets = [Target(**t) for t in state["targets"]]
            last = {name: (url, {json.loads(m): _reading(json.loads(m), r) for m, r in models.items()})
                    for name, (url, models) in state["last"].items()}
            return targets, last
        except FileNotFoundError:
            return [], {}
        except (ValueError, KeyError, TypeError) as e:  # a file cut short by a crash: count from the next reading
            log.warning("serving state %s unreadable (%s): counting from the next reading", self.path, e)
            return [], {}


def _cut(error):
    return error if len(error) <= ERROR_MAX else error[:ERROR_MAX - 3] + "..."


def _listeners():
    """{port: pid} of the TCP sockets listening on this machine that the agent may see ({} where it may see none)."""
    try:
        return {c.laddr.port: c.pid for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.pid}
    except (psutil.Error, OSError):  # denied, or a process gone while the table was read
        return {}


def _local(host):
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        try:
            address = ipaddress.ip_address(socket.gethostbyname(host))
        except (OSError, ValueError):
            return False
    return address.is_loopback or address.is_unspecified or address.compressed in machine_addresses()


def _served_by(url, listeners):
    """The pid of the process serving `url` on this machine, or None (another machine's page, or not seen)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if port not in listeners or not _local(parts.hostname or ""):
        return None
    return listeners[port]


def _delta_fields(d, reading):
    """What a scrape stores of one model: its counts since the last (ModelDelta) and its gauges now."""
    out = {f: getattr(d, f) for f in engines.COUNTERS}
    for h in engines.HISTOGRAMS:
        hist = getattr(d, h)
        out[f"{h}_sum"], out[f"{h}_count"] = (None, None) if hist is None else (hist.sum, hist.count)
    out.update({g: getattr(reading, g) for g in engines.GAUGES})
    out["restarted"] = d.restarted
    return out


def _reading_json(r):
    out = {f: getattr(r, f) for f in (*engines.COUNTERS, "created")}
    for h in engines.HISTOGRAMS:
        hist = getattr(r, h)
        out[h] = None if hist is None else [[list(b) for b in hist.buckets], hist.sum, hist.count]
    return out


def _reading(model, data):
    hists = {h: None if data.get(h) is None else engines.Histogram(tuple(tuple(b) for b in data[h][0]), *data[h][1:])
             for h in engines.HISTOGRAMS}
    return engines.ModelReading(model, **{f: data.get(f) for f in (*engines.COUNTERS, "created")}, **hists)

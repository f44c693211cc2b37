"""Command-line options of the agent, shared by `python -m collector.agent` and `manage.py collect`."""

import argparse
import logging
import re
import signal
import socket
import sys
import threading

from .runner import DB_TIMEOUT_S, Agent
from .serving import EVERY_S_DEFAULT, Scraper
from .sources import SOURCES, SourceError, make_source
from .spool import Spool, SpoolInUse

log = logging.getLogger("collector.agent")

SPOOL_ROOT = "var/collector-spool"  # `manage.py collect`: <data dir>/collector-spool


def spool_dir(opts, root=SPOOL_ROOT):
    """The agent's spool directory: --spool-dir, else one of its own under `root` named by its source and node, so
    agents on one machine (`up`'s collector, a simulated fleet beside it) never share one. Two agents of one source
    and node still would, and the spool's lock refuses the second."""
    if opts.get("spool_dir"):
        return opts["spool_dir"]
    node = opts.get("node") or socket.gethostname()
    return f"{root}/{opts['source']}-{re.sub(r'[^A-Za-z0-9._-]', '_', node)}"


def add_arguments(parser, dsn_required=True, serve_scrape_s=EVERY_S_DEFAULT):
    """The agent's flags; `serve_scrape_s`: --serve-scrape's default (`manage.py collect`: YARDSTICK_SERVE_SCRAPE_S)."""
    if dsn_required:
        parser.add_argument("--dsn", required=True, help="libpq connection string, e.g. postgresql://user@db/yardstick")
    parser.add_argument("--source", required=True, choices=SOURCES, help="where readings come from")
    parser.add_argument("--interval", type=_positive_float, default=1.0, help="seconds between ticks (default 1)")
    parser.add_argument("--node", default=None, help="node name (default: this host's name; dcgm: its Hostname label)")
    parser.add_argument(
        "--label", action="append", default=[], type=parse_label, metavar="KEY=VALUE", help="node label, e.g. team=rl (repeatable)"
    )
    parser.add_argument("--spool-dir", default=None,
                        help="where batches wait while the database is away (default: a folder of this agent's own, "
                             f"<spool root>/<source>-<node>, the root {SPOOL_ROOT} here)")
    parser.add_argument("--spool-max-mb", type=_positive_float, default=512.0, help="spool size cap in MiB (default 512)")
    parser.add_argument(
        "--db-timeout", type=_positive_float, default=DB_TIMEOUT_S,
        help=f"seconds one write may take before it is abandoned and spooled (default {DB_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--serve-scrape", type=_non_negative_float, default=serve_scrape_s, metavar="SECONDS",
        help="seconds between reads of this node's serving deployments' metrics pages, nvml and host sources only; 0: "
             f"none (default {serve_scrape_s:g})")
    parser.add_argument("--ticks", type=_positive_int, default=None, help="stop after this many ticks (default: run until signalled)")
    host = parser.add_argument_group("host source")
    host.add_argument("--cpu-tdp-w", type=_positive_float, default=None, help="CPU TDP for the power estimate (default 10 W per CPU)")
    dcgm = parser.add_argument_group("dcgm source")
    dcgm.add_argument("--url", default=None, help="dcgm-exporter endpoint, e.g. http://localhost:9400/metrics")
    sim = parser.add_argument_group("sim source")
    sim.add_argument("--nodes", type=_positive_int, default=1, help="simulated nodes (default 1)")
    sim.add_argument("--gpus", type=_positive_int, default=8, help="simulated GPUs per node (default 8)")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_label(text):
    """Return a `--label KEY=VALUE` option as (key, value), each stripped (the value may be empty); raise
    argparse.ArgumentTypeError when there is no `=` or no key. The agent's and the import commands' --label."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"must look like KEY=VALUE (e.g. team=rl), got {text!r}")
    return key.strip(), value.strip()


def run(options, dsn, out=None, spool_root=SPOOL_ROOT):
    """Run the agent until SIGTERM/SIGINT (or --ticks); return the process exit status. `spool_root`: where its
    spool directory is when --spool-dir does not say (spool_dir)."""
    opts = options if isinstance(options, dict) else vars(options)
    spool = Spool(spool_dir(opts, spool_root), max_bytes=int(opts["spool_max_mb"] * 2**20))
    try:
        spool.claim()
        source = make_source(opts["source"], opts)
    except (SpoolInUse, SourceError) as exc:
        spool.close()
        log.error("%s", exc)
        return 2
    node = opts.get("node") or socket.gethostname()
    every_s = opts.get("serve_scrape", EVERY_S_DEFAULT)
    # The machine's own sources only: a sim fleet or a dcgm-exporter elsewhere beside `up`'s collector would read
    # this node's deployments a second time.
    scraper = Scraper(node, dsn, spool.dir, every_s) if every_s and opts["source"] in ("nvml", "host") else None
    agent = Agent(source, dsn, spool, interval_s=opts["interval"], labels=dict(opts.get("label") or []),
                  db_timeout_s=opts.get("db_timeout", DB_TIMEOUT_S), phase_key=node, serving=scraper)
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            # Set from a thread of its own: the handler runs in the main thread, perhaps inside stop.wait() while it
            # holds the event's lock, and setting the event there would wait for that lock for ever.
            previous[sig] = signal.signal(sig, lambda *_: threading.Thread(target=stop.set, daemon=True).start())
    log.info(
        "collecting from %s every %gs; spool %s", opts["source"], opts["interval"], spool.dir
    )
    if scraper is not None:
        log.info("reading node %s's serving deployments every %gs", node, every_s)
    try:
        agent.run(stop, ticks=opts.get("ticks"))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("stopped after %d ticks, %d samples written", agent.ticks, agent.samples_written)
    return 0


def configure_logging(stream=None):
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("collector.agent")
    if not root.handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m collector.agent", description="Yardstick telemetry agent")
    add_arguments(parser)
    options = parser.parse_args(argv)
    configure_logging()
    return run(options, options.dsn)

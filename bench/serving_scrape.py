"""The node agent's reads of its serving deployments: CPU per read of every page, as a share of one core.

    python bench/serving_scrape.py [--engines 8] [--every 10] [--rounds 30]

Serves `--engines` metrics pages over real HTTP on this machine (the engines'
recorded pages of tests/serving/data, in turn: vLLM, SGLang, TGI, llama.cpp,
Dynamo, ...), each page's counters moving at every round, and times the
agent's Scraper reading all of them (fetch, parse, what each counter gained,
the last readings kept on disk) `--rounds` times. Its CPU seconds per round ÷
`--every` (the seconds between reads, YARDSTICK_SERVE_SCRAPE_S) is the share
of one core the reads cost (goal: under 1 %). The reference, in the same run:
fetching the same pages alone (urllib, nothing parsed), so the ratio says what
reading them adds to getting them. The database is left out (the deployments
are given, not listed; the counts are not written): the agent's write path
has its own benchmark, bench/ingest.py. CPU is this process's (time.process_time), which also serves the pages:
both sides pay for that alike. Never fails on speed.
"""

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.agent.serving import Scraper, Target, fetch  # noqa: E402

PAGES = ["vllm-new", "sglang", "tgi", "llamacpp", "dynamo", "vllm-old"]
DATA = ROOT / "tests" / "serving" / "data"
GOAL_SHARE = 0.01
NUMBER = re.compile(r"^([a-z_:]+(?:_total|_sum|_count)(?:\{[^}]*\})?) ([0-9.e+]+)$", re.MULTILINE)


class Pages:
    """`n` pages served over HTTP on 127.0.0.1; `advance()` moves every counter of every page."""

    def __init__(self, n):
        self.texts = [(DATA / f"{PAGES[i % len(PAGES)]}.prom").read_text() for i in range(n)]
        self.round = 0
        pages = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = pages.body(int(self.path.strip("/").split("/")[0])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.urls = [f"http://127.0.0.1:{self.server.server_port}/{i}/metrics" for i in range(n)]

    def body(self, i):
        grown = self.round * 100
        return NUMBER.sub(lambda m: f"{m[1]} {float(m[2]) + grown}", self.texts[i])

    def advance(self):
        self.round += 1

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def cpu_per_round(pages, rounds, read):
    cpu = []
    for _ in range(rounds):
        pages.advance()
        started = time.process_time()
        read()
        cpu.append(time.process_time() - started)
    return statistics.median(cpu)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between reads (default 10)")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    if args.engines < 1 or args.rounds < 1 or args.every <= 0:
        parser.error("--engines and --rounds must be >= 1 and --every > 0")
    pages = Pages(args.engines)
    try:
        with tempfile.TemporaryDirectory() as state:
            scraper = Scraper("bench-node", None, state, every_s=args.every)
            scraper.targets = [Target(f"d{i}", "auto", url, "") for i, url in enumerate(pages.urls)]

            def scrape():
                served = scraper.scrape()
                scraper.saved()
                assert all(not s.error for s in served), [s.error for s in served if s.error]

            scrape()  # the first read counts nothing: not timed
            reference = cpu_per_round(pages, args.rounds, lambda: [fetch(u) for u in pages.urls])
            reads = cpu_per_round(pages, args.rounds, scrape)
    finally:
        pages.close()
    print(f"{args.engines} engines' pages ({', '.join(sorted({PAGES[i % len(PAGES)] for i in range(args.engines)}))}"
          f"), read every {args.every:g} s; median of {args.rounds} rounds")
    print(f"fetch only (reference):   {reference * 1e3:8.2f} ms CPU per round")
    print(f"the agent's read:         {reads * 1e3:8.2f} ms CPU per round = {reads / args.every:.3%} of one core "
          f"(goal under {GOAL_SHARE:.0%})")
    print(f"ratio read/fetch: {reads / reference:.2f}")


if __name__ == "__main__":
    main()

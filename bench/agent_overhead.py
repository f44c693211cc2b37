"""Agent overhead: CPU time per tick for 8 simulated GPUs, reading and writing.

    python bench/agent_overhead.py [--dsn DSN] [--gpus 8] [--ticks 300]

Runs the real agent loop (sim source -> batch -> COPY + latest + pending) as
fast as it can for --ticks ticks and divides this process's CPU time by the
ticks; at a 1 s interval that is the share of one core (goal <= 1%). The
same-run reference is the CPU time of the source read alone.
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest import fresh_database, server_dsn  # noqa: E402

from collector.agent.runner import Agent  # noqa: E402
from collector.agent.sources.sim import SimSource  # noqa: E402
from collector.agent.spool import Spool  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=300)
    args = parser.parse_args(argv)
    with server_dsn(args.dsn) as admin:
        dsn = fresh_database(admin)
        import tempfile

        with tempfile.TemporaryDirectory() as spool_dir:
            agent = Agent(SimSource(gpus=args.gpus), dsn, Spool(spool_dir), interval_s=1.0)
            agent.tick()  # connect and register outside the measurement
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(args.ticks):
                agent.tick()
            cpu_s = (time.process_time() - cpu0) / args.ticks
            wall_s = (time.perf_counter() - wall0) / args.ticks
            agent.close()
    source = SimSource(gpus=args.gpus)
    from datetime import datetime, timezone

    cpu0 = time.process_time()
    for _ in range(args.ticks):
        source.read(datetime.now(timezone.utc))
    read_s = (time.process_time() - cpu0) / args.ticks
    print(f"{args.gpus} simulated GPUs, {args.ticks} ticks:")
    print(f"  agent CPU per tick (read + write): {cpu_s * 1000:.3f} ms = {cpu_s * 100:.3f}% of one core at 1 s")
    print(f"  wall time per tick incl. database round trips: {wall_s * 1000:.2f} ms")
    print(f"  reference, source read alone: {read_s * 1000:.3f} ms CPU per tick "
          f"(write path = {(cpu_s - read_s) / cpu_s:.0%} of the agent's CPU)")
    print("goal: <= 1% of one core at a 1 s interval")


if __name__ == "__main__":
    main()

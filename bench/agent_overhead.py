"""Agent overhead: CPU time per tick for 8 simulated GPUs, reading and writing.

    python bench/agent_overhead.py [--dsn DSN] [--gpus 8] [--ticks 300] [--source sim|nvml-rubin]

`--source nvml-rubin` runs the real NVML source, with every reading on (module and memory power and energy,
GPM tensor activity and occupancy, NVLink, clocks event reasons, power limit), over the tests' fake pynvml
with the Rubin superchip profile: the source's own Python work per tick and the wider rows it writes. The
fake answers in Python, not through the driver: the real library's C calls are not in the figure.

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


def fake_rubin_source(gpus):
    """The NVML source over the tests' fake pynvml, `gpus` Rubin superchip GPUs whose clocks move a second a read."""
    sys.path.insert(0, str(ROOT / "tests" / "collector"))
    from fake_pynvml import FakeGpu, FakeNvml

    from collector.agent.sources.nvml import NvmlSource

    fleet = [FakeGpu.rubin_superchip(f"GPU-rubin-{i}") for i in range(gpus)]
    source = NvmlSource("bench-node", nvml=FakeNvml(fleet))
    read = source.read

    def tick(ts):
        for gpu in fleet:
            gpu.clock_us += 1_000_000
            gpu.nvlink_tx_kib += 4096
            gpu.nvlink_rx_kib += 2048
        return read(ts)

    source.read = tick
    return source


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--source", choices=("sim", "nvml-rubin"), default="sim")
    args = parser.parse_args(argv)
    make_source = SimSource if args.source == "sim" else fake_rubin_source
    with server_dsn(args.dsn) as admin:
        dsn = fresh_database(admin)
        import tempfile

        with tempfile.TemporaryDirectory() as spool_dir:
            agent = Agent(make_source(gpus=args.gpus), dsn, Spool(spool_dir), interval_s=1.0)
            agent.tick()  # connect and register outside the measurement
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(args.ticks):
                agent.tick()
            cpu_s = (time.process_time() - cpu0) / args.ticks
            wall_s = (time.perf_counter() - wall0) / args.ticks
            agent.close()
    source = make_source(gpus=args.gpus)
    from datetime import datetime, timezone

    cpu0 = time.process_time()
    for _ in range(args.ticks):
        source.read(datetime.now(timezone.utc))
    read_s = (time.process_time() - cpu0) / args.ticks
    kind = "simulated GPUs" if args.source == "sim" else "fake-NVML Rubin GPUs, every reading on"
    print(f"{args.gpus} {kind}, {args.ticks} ticks:")
    print(f"  agent CPU per tick (read + write): {cpu_s * 1000:.3f} ms = {cpu_s * 100:.3f}% of one core at 1 s")
    print(f"  wall time per tick incl. database round trips: {wall_s * 1000:.2f} ms")
    print(f"  reference, source read alone: {read_s * 1000:.3f} ms CPU per tick "
          f"(write path = {(cpu_s - read_s) / cpu_s:.0%} of the agent's CPU)")
    print("goal: <= 1% of one core at a 1 s interval")


if __name__ == "__main__":
    main()

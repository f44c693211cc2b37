"""Where the suite's time goes: `-p tests.timeline` writes each test's start, end and CPU time, one file per test
process, and `python -m tests.timeline DIR` sums them up (by folder, the slowest tests, each worker's idle tail).

    make test PYTEST_ARGS="-p tests.timeline"       # writes var/timeline/<worker>.tsv
    .venv/bin/python -m tests.timeline var/timeline

CPU is that of the test process's tree: its own, the children it waited for (a `manage.py ...`, a launched run),
and what its live descendants spent during the test (the worker's Chromium, its shared Daphne, Celery workers).
Servers started outside the tree or that leave it (PostgreSQL, a daemonised Ray head) count nowhere. docs/development.md has the
figures of the last measure.
"""

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = Path(__file__).resolve().parent.parent / "var" / "timeline"


TICK = os.sysconf("SC_CLK_TCK")


def _tree():
    """{pid: (start time, CPU seconds)} of this process's tree: each member's own CPU and its reaped children's."""
    parent, cpu = {}, {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(entry.name)] = int(fields[1])
            cpu[int(entry.name)] = (fields[19], sum(int(x) for x in fields[11:15]) / TICK)
    tree, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: cpu[pid] for pid in tree if pid in cpu}


def _cpu_since(before):
    """CPU the tree spent since `before`: a member alive at both counts its difference, a new one all of it; one
    that left the tree (its parent died: init reaps it) counts nowhere, one reaped by a member counts in its reaper."""
    total = 0.0
    for pid, (started, cpu) in _tree().items():
        was = before.get(pid)
        total += cpu - (was[1] if was and was[0] == started else 0.0)
    return total


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the run's own process (xdist's workers start after this): a new timeline
        for old in OUT.glob("*.tsv"):
            old.unlink()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, tree = time.time(), _tree()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"{worker}.tsv", "a") as f:
        f.write(f"{item.nodeid}\t{start:.3f}\t{time.time():.3f}\t{_cpu_since(tree):.3f}\n")


def summary(folder):
    rows = []
    for path in sorted(Path(folder).glob("*.tsv")):
        for line in path.read_text().splitlines():
            nodeid, start, end, cpu = line.split("\t")
            rows.append((path.stem, nodeid, float(start), float(end), float(cpu)))
    if not rows:
        return f"no timeline in {folder}"
    first, last = min(r[2] for r in rows), max(r[3] for r in rows)
    out = [f"{len(rows)} tests, {last - first:.0f} s from the first start to the last end"]
    for worker in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == worker]
        out.append(f"  {worker}: {sum(r[3] - r[2] for r in mine):.0f} s in tests, done {last - max(r[3] for r in mine):.0f} s "
                   "before the last")
    by = defaultdict(lambda: [0, 0.0, 0.0])
    for _, nodeid, start, end, cpu in rows:
        folder_name = nodeid.split("/")[1] if nodeid.startswith("tests/") else nodeid.split("/")[0]
        by[folder_name][0] += 1
        by[folder_name][1] += end - start
        by[folder_name][2] += cpu
    out.append(f"{'folder':<12} {'tests':>6} {'seconds':>8} {'CPU s':>8}")
    for name, (n, secs, cpu) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        out.append(f"{name:<12} {n:>6} {secs:>8.0f} {cpu:>8.0f}")
    out.append("slowest:")
    for _, nodeid, start, end, cpu in sorted(rows, key=lambda r: r[2] - r[3])[:15]:
        out.append(f"  {end - start:6.1f} s {cpu:6.1f} CPU s  {nodeid}")
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(sys.argv[1] if len(sys.argv) > 1 else OUT))

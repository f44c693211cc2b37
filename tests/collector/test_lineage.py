"""Where a holder process comes from: ancestors and launcher ids, read from /proc of real processes."""

import os
import subprocess
import sys
import time

import pytest

from collector.agent.lineage import ANCESTOR_DEPTH, Lineages, ancestors, launcher_ids

# A launcher-like parent that starts one worker and prints the worker's PID.
LAUNCHER = (
    "import subprocess, sys, time\n"
    "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(w.pid, flush=True)\n"
    "try:\n    time.sleep(120)\nfinally:\n    w.kill()\n"
)


@pytest.fixture
def launched():
    """(launcher process, worker PID): a worker two levels below this test, with SLURM and torchrun ids."""
    env = {**os.environ, "SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "grpo-7", "RAY_JOB_ID": ""}
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], env=env, stdout=subprocess.PIPE, text=True)
    worker_pid = int(launcher.stdout.readline())
    # Until the worker has exec'd its own program, /proc shows a half-made process (no environment yet).
    cmdline = f"/proc/{worker_pid}/cmdline"
    deadline = time.monotonic() + 10
    while b"time.sleep(120)" not in open(cmdline, "rb").read() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield launcher, worker_pid
    launcher.kill()
    launcher.wait()


def test_it_reads_a_workers_ancestors_nearest_first(launched):
    launcher, worker_pid = launched

    chain = ancestors(worker_pid)

    assert chain[:2] == (launcher.pid, os.getpid())
    assert 1 not in chain and len(chain) <= ANCESTOR_DEPTH


def test_it_reads_the_launcher_ids_set_in_a_workers_environment_and_skips_empty_ones(launched):
    _, worker_pid = launched

    assert launcher_ids(worker_pid) == {"SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "grpo-7"}


def test_a_process_that_is_gone_is_recorded_without_lineage():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    holder = Lineages().holder(gone.pid, 10)

    assert (holder.holder, holder.pid, holder.used_mem_mib) == (f"pid:{gone.pid}", gone.pid, 10)
    assert (holder.ancestors, holder.launcher_ids) == ((), {})


def test_it_reads_a_process_once_and_again_when_its_pid_is_reused(launched, tmp_path):
    _, worker_pid = launched
    lineages = Lineages()
    first = lineages.holder(worker_pid)
    # As if an older process had had this PID: another start time, another lineage.
    lineages._known[worker_pid] = (-1, (999,), {"SLURM_JOB_ID": "old"})

    again = lineages.holder(worker_pid)

    assert again.ancestors == first.ancestors and again.launcher_ids == first.launcher_ids
    lineages.forget_others(set())
    assert lineages._known == {}

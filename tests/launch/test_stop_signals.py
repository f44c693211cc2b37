"""The worker's stop steps as a launched command's processes receive them (launch/guard.py kill_all): each signal
once, to the process group and to the processes that left it carrying the start's mark."""

import os
import signal
import subprocess
import sys

from launch.guard import MARK, kill_all

# Counts the SIGTERMs it receives; a second second after the first, prints how many and exits.
COUNTER = """
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(time.monotonic()))
print("ready", flush=True)
while not got or time.monotonic() - got[0] < 1.0:
    time.sleep(0.01)
print(len(got), flush=True)
"""


def start_counter(mark, **popen):
    proc = subprocess.Popen([sys.executable, "-c", COUNTER], env={**os.environ, MARK: mark}, stdout=subprocess.PIPE,
                            text=True, **popen)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sigterm_reaches_each_process_of_the_run_once():
    group_leader = start_counter("mark-1", start_new_session=True)
    # Left the group (a session of its own), as a launcher's child may: found by its mark.
    runaway = start_counter("mark-1", start_new_session=True)

    kill_all("mark-1", group_leader.pid, signal.SIGTERM)

    assert group_leader.communicate(timeout=10)[0].strip() == "1"
    assert runaway.communicate(timeout=10)[0].strip() == "1"

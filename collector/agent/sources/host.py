"""This machine's CPU as one device (psutil), so Yardstick works with no GPU.

Measured: utilization (all cores, since the previous tick), memory, clock,
temperature where a sensor exists. Estimated, and flagged `power_estimated`:
power, as idle share + load share of a configured TDP (`--cpu-tdp-w`), and the
energy counter, which integrates that estimate from the agent's start.

Holders: every HOLDERS_EVERY_S the processes that used at least
HOLDER_MIN_CORES of a core since the previous scan, with their resident
memory and lineage (lineage.py), so a CPU-only job can be told apart from the
rest of the machine. The agent's first scan takes the baseline; the second
comes FIRST_HOLDERS_AFTER_S later, so a job's holder is known a second after
the agent starts, not ten.
"""

import platform
import socket
import time
import uuid as uuidlib
from pathlib import Path

import psutil

from ..batch import DeviceInfo, Reading
from ..lineage import Lineages
from .base import machine_addresses

# A server CPU draws roughly this share of its TDP when idle (an estimate).
IDLE_SHARE = 0.3
# Default TDP per logical CPU when --cpu-tdp-w is not given (an estimate).
TDP_PER_CPU_W = 10.0
MIB = 2**20
# How often the process table is scanned for holders (a scan reads every
# process's /proc entry: a few milliseconds, too much for every tick).
HOLDERS_EVERY_S = 10.0
# The scan after the baseline one, at the agent's start, comes this soon (a shorter window measures a process's
# share of a core less surely: /proc counts CPU in hundredths of a second).
FIRST_HOLDERS_AFTER_S = 1.0
# A process holds the CPU when it used at least this many cores on average
# between two scans.
HOLDER_MIN_CORES = 0.1


def default_tdp_w():
    return TDP_PER_CPU_W * (psutil.cpu_count() or 1)


class HostSource:
    name = "host"

    def __init__(self, node, cpu_tdp_w=None, clock=time.monotonic, holders_every_s=HOLDERS_EVERY_S):
        self.node = node
        self.addresses = machine_addresses()  # this machine's: a scheduler may name the node by one
        self.tdp_w = float(cpu_tdp_w) if cpu_tdp_w else default_tdp_w()
        if self.tdp_w <= 0:
            raise ValueError(f"cpu_tdp_w must be > 0, got {cpu_tdp_w}")
        self.clock = clock
        self.info = DeviceInfo(
            uuid=host_uuid(node),
            node=node,
            index=0,
            model=cpu_model(),
            source="host",
            power_estimated=True,
            mem_total_mib=psutil.virtual_memory().total // MIB,
        )
        psutil.cpu_percent(None)  # primes the counter: the first real read covers one tick
        self.energy_j = 0.0
        self._last = None  # (monotonic time, power_w) of the previous tick
        self.holders_every_s = holders_every_s
        self._scanned_at = None  # time.monotonic() of the last process scan
        self._scans = 0
        self._cpu_s = {}  # (pid, create time) -> CPU seconds at the last scan
        self.lineages = Lineages()

    def power_w(self, util_pct):
        return self.tdp_w * (IDLE_SHARE + (1 - IDLE_SHARE) * util_pct / 100.0)

    def read(self, ts):
        util = psutil.cpu_percent(None)
        mem = psutil.virtual_memory()
        power = self.power_w(util)
        now = self.clock()
        if self._last is not None:
            # trapezoid over the tick, of the estimate
            self.energy_j += (now - self._last[0]) * (power + self._last[1]) / 2
        self._last = (now, power)
        freq = psutil.cpu_freq()
        values = (
            util,
            mem.percent,
            power,
            self.energy_j,
            (mem.total - mem.available) // MIB,
            mem.total // MIB,
            _temperature(),
            None if freq is None else int(freq.current),
            None,  # no SM activity on a CPU
        )
        return [Reading(self.info, values, self._holders())]

    def _holders(self):
        """The busy processes since the last scan, when a scan is due; else ()."""
        now = time.monotonic()
        due = self.holders_every_s if self._scans > 1 else min(self.holders_every_s, FIRST_HOLDERS_AFTER_S)
        if self._scanned_at is not None and now - self._scanned_at < due:
            return ()
        cpu_s, busy = {}, []
        for proc in psutil.process_iter(["pid", "create_time", "cpu_times", "memory_info"]):
            info = proc.info
            times, mem = info["cpu_times"], info["memory_info"]
            if times is None:  # gone or not ours to read
                continue
            key = (info["pid"], info["create_time"])  # a reused PID is another process
            cpu_s[key] = used = times.user + times.system
            before = self._cpu_s.get(key)
            if self._scanned_at is not None and before is not None:
                if (used - before) / (now - self._scanned_at) >= HOLDER_MIN_CORES:
                    busy.append(self.lineages.holder(info["pid"], None if mem is None else mem.rss // MIB))
        self._cpu_s, self._scanned_at = cpu_s, now
        self._scans += 1
        self.lineages.forget_others({h.pid for h in busy})
        return tuple(busy)

    def close(self):
        pass


def host_uuid(node):
    """A stable id for this node's CPU: from /etc/machine-id and the node name (two node names on one
    machine, as in a test of two nodes, are two devices, each charged for its own node's jobs)."""
    try:
        machine = Path("/etc/machine-id").read_text().strip()
    except OSError:
        machine = ""
    node = node or socket.gethostname()
    return "CPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{machine}/{node}" if machine else node))


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def _temperature():
    read = getattr(psutil, "sensors_temperatures", None)
    if read is None:
        return None
    try:
        sensors = read()
    except (OSError, RuntimeError):
        return None
    for name in ("coretemp", "k10temp", "cpu_thermal", "zenpower"):
        if sensors.get(name):
            return float(sensors[name][0].current)
    return None

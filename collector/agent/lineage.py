"""Where a holder process comes from: its ancestor PIDs and its launcher's job ids.

Yardstick matches a training run reported through MLflow (tagged with its host
and PID by the yardstick-mlflow package) to the processes holding GPUs: on the
run's host, a holder that is the run's process or descends from it (torchrun
ranks, rollout workers); on any node, a holder whose environment carries the
run's launcher id (the other nodes of a multi-node run). So for each holder
the agent records

- `ancestors`: the parent PID, its parent, ... up to ANCESTOR_DEPTH levels,
  stopping before PID 1 (init, or a container's entry point: an ancestor of
  everything, so it tells nothing);
- `launcher_ids`: the values of LAUNCHER_VARS in /proc/<pid>/environ.

Read from /proc (Linux; the agent runs as root on GPU nodes, so it can read
every process's environment). What cannot be read (another user's process
when not root, a process already gone, another OS) is recorded as absent:
no ancestors, no launcher ids. The environment and the parents of a running
process do not change (a parent that dies reparents its children, but the
lineage that matters is the one it started with), so both are read once per
process: cached by (PID, start time), since PIDs are reused.
"""

from pathlib import Path

from .batch import Holder

ANCESTOR_DEPTH = 8
# Launchers set these in every process of one job, on every node.
LAUNCHER_VARS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "RAY_JOB_ID", "YARDSTICK_JOB_ID")


def _stat(proc, pid):
    """(parent PID, start time in clock ticks) of `pid`, or None when it cannot be read."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last ')'.
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return int(fields[1]), int(fields[19])  # fields 4 (ppid) and 22 (starttime) of proc(5)
    except (IndexError, ValueError):
        return None


def ancestors(pid, proc=Path("/proc")):
    """The PIDs above `pid`, nearest first, at most ANCESTOR_DEPTH, without PID 1 and 0."""
    chain = []
    seen = {pid}
    stat = _stat(proc, pid)
    while stat is not None and len(chain) < ANCESTOR_DEPTH:
        parent = stat[0]
        if parent <= 1 or parent in seen:
            break
        chain.append(parent)
        seen.add(parent)
        stat = _stat(proc, parent)
    return tuple(chain)


def launcher_ids(pid, proc=Path("/proc")):
    """{variable: value} of the LAUNCHER_VARS set (non-empty) in `pid`'s environment; {} when unreadable."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    found = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value:
            key = name.decode("ascii", "replace")
            if key in LAUNCHER_VARS:
                found[key] = value.decode("utf-8", "replace")
    return found


class Lineages:
    """Holders with their lineage, read once per process (see the module docstring)."""

    def __init__(self, proc=Path("/proc")):
        self.proc = proc
        self._known = {}  # pid -> (start time, ancestors, launcher ids)

    def holder(self, pid, used_mem_mib=None):
        """A `Holder` for host process `pid`, with its ancestors and launcher ids when readable."""
        stat = _stat(self.proc, pid)
        if stat is None:
            return Holder(holder=f"pid:{pid}", pid=pid, used_mem_mib=used_mem_mib)
        known = self._known.get(pid)
        if known is None or known[0] != stat[1]:  # new, or the PID was reused
            known = (stat[1], ancestors(pid, self.proc), launcher_ids(pid, self.proc))
            self._known[pid] = known
        return Holder(holder=f"pid:{pid}", pid=pid, used_mem_mib=used_mem_mib,
                      ancestors=known[1], launcher_ids=known[2])

    def forget_others(self, pids):
        """Drop what is cached for processes not in `pids` (those no longer holding anything)."""
        if len(self._known) > len(pids):
            self._known = {pid: v for pid, v in self._known.items() if pid in pids}

"""The watchdog `manage.py up` starts beside its parts: when `up` ends without having stopped them (SIGKILL, the
OOM killer, a crash), the watchdog stops them, so no part outlives it.

`up` writes one JSON line on the watchdog's stdin whenever what it runs changes:
`{"groups": [the process groups of its children], "redis": pid or null, "postgres": its data folder or null}`,
and `done` once it has stopped them itself. When stdin ends without `done` (the kernel closes the pipe however
`up` ends) the watchdog SIGKILLs every group (a Celery worker's pool processes with it), asks Redis (SIGTERM) and
PostgreSQL (SIGINT, its fast shutdown) to stop, and kills what is still there after their grace, all within
`GRACE_S` + `LAST_S`. It also holds `up`'s lock on the data dir (it inherits the descriptor) until then, so a new
`up` never starts on servers that are still stopping.

Why not prctl(PR_SET_PDEATHSIG) in each child: it reaches only the direct child (not a worker's pool processes,
nor the postmaster that pg_ctl daemonizes), it fires when the *thread* that started the child ends, and it is
cleared when the child changes user (PostgreSQL, started as root, runs as another). The end of the pipe is the
kernel's word that `up` is gone, whatever ended it.

Standard library only, and run as `python -I <this file>`: no Django, no other module of Yardstick, and nothing
the script's own folder could shadow.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

GRACE_S = 5.0  # Redis writes its snapshot, PostgreSQL its shutdown checkpoint
LAST_S = 3.0  # after an immediate shutdown (SIGQUIT), PostgreSQL gets SIGKILL
POLL_S = 0.05


def alive(pid):
    """True while `pid` runs (a zombie, left for a parent to reap, has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z"


def send(pid, sig, group=False):
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def postmaster(folder):
    """The PID in `folder`/postmaster.pid, or None."""
    try:
        return int((Path(folder) / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def say(line):
    sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} watchdog: {line}\n")
    sys.stderr.flush()


def stop(parts, up_pid):
    """Stop what `parts` (the last line `up` wrote) names; return when it is gone or was killed."""
    groups = [g for g in parts.get("groups", []) if g > 1]
    redis, pg = parts.get("redis"), postmaster(parts["postgres"]) if parts.get("postgres") else None
    say(f"up (pid {up_pid}) ended without stopping its parts: killing process groups "
        f"{', '.join(map(str, groups)) or '(none)'}; stopping redis ({redis}) and postgres ({pg})")
    for group in groups:
        send(group, signal.SIGKILL, group=True)
    servers = [(pid, sig, last) for pid, sig, last in ((redis, signal.SIGTERM, signal.SIGKILL),
                                                       (pg, signal.SIGINT, signal.SIGQUIT)) if pid]
    for pid, sig, _ in servers:
        send(pid, sig)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(alive(pid) for pid, _, _ in servers):
        time.sleep(POLL_S)
    for pid, _, last in servers:
        if alive(pid):
            say(f"{pid} still runs after {GRACE_S:g} s: sending {signal.Signals(last).name}")
            send(pid, last)
    deadline = time.monotonic() + LAST_S
    while time.monotonic() < deadline and any(alive(pid) for pid, _, _ in servers):
        time.sleep(POLL_S)
    for pid, _, _ in servers:
        send(pid, signal.SIGKILL)
    say("done")


def watch(lines, up_pid):
    """Read `up`'s lines until they end; stop its parts unless the last one was `done`. Return an exit code."""
    parts = {}
    for line in lines:
        if line.strip() == "done":
            return 0
        try:
            parts = json.loads(line)
        except ValueError:
            say(f"ignored a line that is not JSON: {line.strip()[:200]!r}")
    stop(parts, up_pid)
    return 0


if __name__ == "__main__":
    # Not the terminal's: Ctrl-C and a closed terminal are for `up`, which then tells this process it is done.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(watch(sys.stdin, os.getppid()))

"""`manage.py up` starts every part, supervises it, and leaves nothing behind on Ctrl-C.

A real subprocess with its own embedded PostgreSQL and Redis in a temp data dir.
"""

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.slow


class Up:
    def __init__(self, data_dir, port):
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env.update(YARDSTICK_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "up", "--port", str(port), "--ready-timeout", "90"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.lines = []
        self.queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            self.queue.put(line.rstrip())

    def wait_for(self, pattern, timeout=150):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.queue.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r}; output was:\n" + "\n".join(self.lines[-60:]))

    def health(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=90)


def processes_using(data_dir):
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            text = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["environ"] or {}).get("YARDSTICK_DATA_DIR", "")
        except (psutil.Error, TypeError):
            continue
        if str(data_dir) in text and proc.pid != os.getpid():
            found.append((proc.pid, text[:120]))
    return found


def test_up_runs_every_part_restarts_a_dead_one_and_stops_them_all(service_dir):
    data_dir = service_dir / "data"
    up = Up(data_dir, free_port())
    try:
        pids = {}
        for name in ("web", "worker", "jobs", "beat", "collector"):
            pids[name] = int(up.wait_for(rf"started {name} \(pid (\d+)\)").group(1))
        login = up.wait_for(r"Yardstick is at http://127\.0\.0\.1:\d+/ +log in as admin / (\S+)").group(1)
        assert (data_dir / "admin-password").read_text().strip() == login
        assert oct((data_dir / "admin-password").stat().st_mode & 0o777) == "0o600"

        deadline = time.monotonic() + 20
        status, body = up.health()
        while status != 200 and time.monotonic() < deadline:  # a loaded machine answers a ping late
            time.sleep(1)
            status, body = up.health()
        for part in ("database", "broker", "worker", "beat", "collectors"):
            assert body["checks"][part]["ok"], (part, body)
        assert status == 200

        # Output of each child is prefixed with its name.
        assert any(re.match(r"^\s*web \| ", line) for line in up.lines)
        assert any(re.match(r"^\s*worker \| ", line) for line in up.lines)

        # A second `up` on the same data dir refuses instead of corrupting it.
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        second = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "up", "--port", str(free_port())],
            cwd=ROOT, env={**env, "YARDSTICK_DATA_DIR": str(data_dir)}, capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 1
        assert "already running on this data dir" in second.stdout

        # A child that dies is reported and restarted.
        os.killpg(pids["beat"], signal.SIGKILL)
        up.wait_for(r"beat exited with code -9; restarting in 1 s")
        new_pid = int(up.wait_for(r"started beat \(pid (\d+)\)").group(1))
        assert new_pid != pids["beat"]
    finally:
        code = up.stop()
    assert code == 0
    assert "stopped" in up.lines[-1]
    time.sleep(0.5)
    assert processes_using(data_dir) == []
    for pid in pids.values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    # A second run starts on the kept data: same admin, no new password.
    again = Up(data_dir, free_port())
    try:
        line = again.wait_for(r"Yardstick is at .* log in as (.*)").group(1)
        assert line.startswith("admin (password in")
        assert (data_dir / "admin-password").read_text().strip() == login
    finally:
        assert again.stop() == 0
    assert processes_using(data_dir) == []

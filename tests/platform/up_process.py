"""A real `manage.py up` subprocess for the platform tests: its output line by line, /healthz, Ctrl-C."""

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

from tests.conftest import ROOT
from tests.waiting import wait_for


class Up:
    def __init__(self, data_dir, port, env=None, args=()):
        """`env`: variables to set for this `up` on top of this process's (less DATABASE_URL, REDIS_URL);
        `args`: more flags for it."""
        env = {**{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}, **(env or {})}
        env.update(YARDSTICK_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "up", "--port", str(port), "--ready-timeout", "90", *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.lines = []
        self.queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            self.queue.put(line.rstrip())

    def wait_for_line(self, pattern, timeout=150):
        """The match of the first output line from now on that matches `pattern`; fail after `timeout` s."""
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

    def wait_for_any_line(self, pattern, timeout=60):
        """The match of the first line so far or from now on (however many were waited for since) that matches."""
        return wait_for(lambda: next(filter(None, (re.search(pattern, line) for line in list(self.lines))), None),
                        timeout, every_s=0.5,
                        what=lambda: f"a line matching {pattern!r}; output was:\n" + "\n".join(self.lines[-60:]))

    def health(self):
        """(status, body) of /healthz, or (None, None) while the web process does not answer at all."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())
        except OSError:
            return None, None

    def healthy(self, timeout_s=60):
        """Wait until /healthz answers 200 (every check ok); return the seconds it took."""
        began, last = time.monotonic(), {}

        def ok():
            last["status"], last["body"] = self.health()
            return last["status"] == 200

        wait_for(ok, timeout_s, every_s=0.5,
                 what=lambda: f"/healthz to answer 200; last {last}\n" + "\n".join(self.lines[-40:]))
        return time.monotonic() - began

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=90)


def processes_using(data_dir):
    """(pid, command) of every other process started with `data_dir` on its command line or in its environment."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            text = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["environ"] or {}).get("YARDSTICK_DATA_DIR", "")
        except (psutil.Error, TypeError):
            continue
        if str(data_dir) in text and proc.pid != os.getpid():
            found.append((proc.pid, text[:120]))
    return found

"""`manage.py up` leaves no process behind however it ends: Ctrl-C through a pipe whose reader dies with it
(`make run 2>&1 | tee log`: the terminal's writes fail while it stops), and a SIGKILL, which no code of its own
sees (its watchdog stops the parts). A port another server holds is said at once, never "ready".

Each `up` runs the web server and a Celery worker (whose pool process is a grandchild) on the embedded
PostgreSQL (which pg_ctl daemonizes) and Redis of one data dir, kept between the tests so only the first pays
for initdb and the migrations.
"""

import http.server
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from tests.conftest import ROOT, free_port
from tests.platform.up_process import Up, processes_using
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

ROLES = ["--role", "web,worker", "--ready-timeout", "1"]  # web and worker are enough; do not wait for beat


@pytest.fixture(scope="module")
def data_dir():
    path = ROOT / "var" / "test-services" / uuid.uuid4().hex[:12]
    path.mkdir(parents=True)
    yield path / "data"
    shutil.rmtree(path, ignore_errors=True)


def up_env(data_dir):
    return {**{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
            "YARDSTICK_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"}


def everything_of(up_pid, data_dir, log):
    """The PIDs of every process this `up` runs, once all of it runs: its children and theirs (the worker's pool
    process), the postmaster and its processes, Redis."""
    def found():
        text = log.read_text() if log.exists() else ""
        if not re.search(r"started worker \(pid \d+\)", text) or "Yardstick is at" not in text:
            return None
        pids = {p.pid for p in psutil.Process(up_pid).children(recursive=True)}
        postmaster = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
        pids |= {postmaster} | {p.pid for p in psutil.Process(postmaster).children(recursive=True)}
        worker = int(re.search(r"started worker \(pid (\d+)\)", text).group(1))
        return pids if psutil.Process(worker).children() else None  # its pool process has started

    return wait_for(found, 240, "every part of up to run", every_s=0.5, logs=[log])


def running(pids):
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_ctrl_c_through_a_pipe_whose_reader_dies_stops_every_part(data_dir):
    log = data_dir.parent / "tee.log"
    shell = subprocess.Popen(
        ["bash", "-c", f"{sys.executable} manage.py up --port {free_port()} {' '.join(ROLES)} 2>&1 | tee {log}"],
        cwd=ROOT, env=up_env(data_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
    )
    try:
        up_pid = wait_for(lambda: next((p.pid for p in psutil.Process(shell.pid).children()
                                        if "up" in p.cmdline()), None), 30, "up to start")
        pids = everything_of(up_pid, data_dir, log)
        tee = next(p for p in psutil.Process(shell.pid).children() if p.name() == "tee")

        os.killpg(shell.pid, signal.SIGINT)  # Ctrl-C: the shell, up and tee alike

        wait_for(lambda: not running([tee.pid]), 10, "tee to end on Ctrl-C")
        wait_for(lambda: not running(pids | {up_pid}), 60, lambda: f"every part to stop; left {running(pids)}")
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
    assert processes_using(data_dir) == []
    up_log = (data_dir / "log" / "up.log").read_text().splitlines()
    # It stopped in order, writing to its log once the terminal was gone.
    assert any("the terminal is gone" in line for line in up_log), up_log[-10:]
    assert up_log[-1].endswith("up | stopped"), up_log[-10:]
    # The web server last: a run stopping at its flag reports its last metrics to it while the workers stop.
    waves = [line.split("up | stopping ", 1)[1] for line in up_log if "up | stopping " in line]
    assert waves[-1] == "web" and "web" not in waves[-2].split(", "), waves


def test_a_sigkilled_up_leaves_no_process_within_10_s(data_dir):
    log = data_dir.parent / "killed.log"
    with open(log, "w") as out:
        up = subprocess.Popen([sys.executable, "manage.py", "up", "--port", str(free_port()), *ROLES], cwd=ROOT,
                              env=up_env(data_dir), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    pids = set()
    try:
        pids = everything_of(up.pid, data_dir, log)

        up.kill()
        killed_at = time.monotonic()
        up.wait()

        wait_for(lambda: not running(pids), 10, lambda: f"every part to end; left {running(pids)}", logs=[log])
        print(f"every part of a SIGKILLed up ended {time.monotonic() - killed_at:.1f} s after the kill")
    finally:
        if up.poll() is None:
            up.kill()
        for pid in running(pids):  # what the watchdog failed to stop must not outlive the test
            os.kill(pid, signal.SIGKILL)
    assert processes_using(data_dir) == []
    watchdog_log = (data_dir / "log" / "watchdog.log").read_text()
    assert f"up (pid {up.pid}) ended without stopping its parts" in watchdog_log


class Healthy(http.server.BaseHTTPRequestHandler):
    """Another server on the port that answers /healthz as a healthy Yardstick would."""

    def do_GET(self):
        body = b'{"checks": {}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_up_on_a_port_another_server_holds_says_so_and_is_never_ready(data_dir):
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    up = Up(data_dir, other.server_address[1], args=ROLES)
    try:
        code = up.proc.wait(timeout=60)
    finally:
        if up.proc.poll() is None:
            up.stop()
        other.shutdown()
    up.wait_for_any_line(r"cannot listen", timeout=5)
    assert code == 1
    assert up.lines[-1] == (f"       up | cannot listen on 127.0.0.1:{up.port}: Address already in use; another "
                            "server holds it (an `up` still running?): stop it, or choose another --port")
    assert not any(re.search(r"\b(ready|started)\b", line) for line in up.lines), up.lines
    assert processes_using(data_dir) == []

"""`manage.py up` starts every part, supervises it, and leaves nothing behind on Ctrl-C.

A real subprocess with its own embedded PostgreSQL and Redis in a temp data dir. Starting one costs
tens of seconds, so a single `up` walks every scenario in turn: its start (a terminal a person can
read, ending with the URL and the login; each part's whole output in its log file), a second `up`
turned away, its embedded Redis and PostgreSQL killed with SIGKILL (the way a crash or the OOM
killer ends them) and brought back on their data while the children stay, a dead child restarted,
then a sweep with two trials running and Ctrl-C, with no per-task line on the terminal all along; a second run
with `--verbose` then starts on the data it kept, prints those lines too, and the sweep goes on without a stranded
or doubly counted trial (tests/sweeps/restart_walk.py).
"""

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import psycopg
import pytest

from tests.conftest import ROOT, free_port
from tests.platform.up_process import Up, processes_using
from tests.sweeps import restart_walk
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

CHILD_STARTED = r"started (web|worker|jobs|beat|collector) "
CHILD_EXITED = r"(web|worker|jobs|beat|collector) exited"
# What Celery prints per task and beat per tick, every few seconds: for the log files, not the terminal.
PER_TASK = r"Task \S+\[[\w-]+\] (received|succeeded in)|Sending due task"
LOGIN = r"^ +up \| log in as admin / (\S+)   \(shown once; kept in "
FAST_SWEEPS = {"YARDSTICK_SWEEP_PASS_S": "2"}  # the sweep's pass every 2 s, not 15


def test_up_runs_every_part_restarts_a_dead_child_or_server_and_stops_them_all(service_dir):
    data_dir = service_dir / "data"
    pg_port = free_port()
    # Its PostgreSQL also listens on TCP for GPU nodes, as a control plane's does.
    gate = service_dir / "gate"
    gate.mkdir()
    settings = {"YARDSTICK_PG_LISTEN": "127.0.0.1", "YARDSTICK_PG_PORT": str(pg_port),
                "YARDSTICK_PG_PASSWORD": "correct horse battery", **FAST_SWEEPS}
    up = Up(data_dir, free_port(), env=settings)
    tcp = f"host=127.0.0.1 port={pg_port} user=postgres dbname=yardstick connect_timeout=5"
    pids = {}
    try:
        url = up.wait_for_line(r"GPU nodes: DATABASE_URL=(\S+)").group(1)
        assert url == f"postgresql://postgres:$YARDSTICK_PG_PASSWORD@127.0.0.1:{pg_port}/yardstick"
        for name in ("web", "worker", "jobs", "beat", "collector"):
            pids[name] = int(up.wait_for_line(rf"started {name} \(pid (\d+)\)").group(1))
        login = up.wait_for_line(LOGIN).group(1)
        assert (data_dir / "admin-password").read_text().strip() == login
        assert oct((data_dir / "admin-password").stat().st_mode & 0o777) == "0o600"
        # Start-up fits a screen and ends with the URL and the login, where the eye lands.
        start_up = up.lines[:next(i for i, line in enumerate(up.lines) if re.search(LOGIN, line)) + 1]
        assert len(start_up) < 40, "\n".join(start_up)
        assert re.match(rf"^ +up \| Yardstick is at http://127\.0\.0\.1:{up.port}/$", start_up[-2]), start_up
        assert re.match(rf"^ +up \| ready; full logs: {re.escape(str(data_dir / 'log'))}/<part>\.log ", start_up[-3])

        up.healthy(timeout_s=20)  # a loaded machine answers a ping late
        status, body = up.health()
        for part in ("database", "broker", "worker", "beat", "collectors"):
            assert body["checks"][part]["ok"], (part, body)
        assert status == 200
        with psycopg.connect(tcp + " password='correct horse battery'") as conn:
            assert conn.execute("SELECT count(*) FROM auth_user WHERE username = 'admin'").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(tcp + " password=guess-guess-guess")

        # Each part's whole output is in its file; the terminal has its events, prefixed with its name (the jobs
        # worker's report may come after /healthz saw the other worker answer).
        up.wait_for_any_line(r"^ +jobs \| INFO trainer\.tasks: worker jobs@\S+ reported", timeout=30)
        logs = data_dir / "log"
        wait_for(lambda: re.search(r"Task yardstick\.tasks\.beat_tick\[[\w-]+\] succeeded in",
                                   (logs / "worker.log").read_text()), 30, "a beat tick in worker.log")
        assert re.search(r"Task yardstick\.tasks\.beat_tick\[[\w-]+\] received", (logs / "worker.log").read_text())
        # (beat sends its first beat-tick as it starts, the next when due: "Sending due task ...", in its file.)
        wait_for(lambda: "Sending due task" in (logs / "beat.log").read_text(), 30, "a due task in beat.log")
        assert '"GET /healthz" 200' in (logs / "web.log").read_text()
        assert "INFO collecting from host" in (logs / "collector.log").read_text()
        assert "[tasks]" in (logs / "jobs.log").read_text()  # Celery's banner
        assert "ready to accept connections" in (logs / "redis.log").read_text()
        assert (logs / "postgres.log").exists()
        up_log = (logs / "up.log").read_text()
        assert f"Yardstick is at http://127.0.0.1:{up.port}/" in up_log and login not in up_log

        # A second `up` on the same data dir refuses instead of corrupting it.
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        second = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "up", "--port", str(free_port())],
            cwd=ROOT, env={**env, "YARDSTICK_DATA_DIR": str(data_dir)}, capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 1
        assert "already running on this data dir" in second.stdout

        # A killed embedded server is restarted on its data, and /healthz recovers.
        redis_pid = int((data_dir / "redis" / "redis.pid").read_text())
        os.kill(redis_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        up.wait_for_line(r"redis exited with code -9; restarting in 1 s")
        new_redis = int(up.wait_for_line(r"started redis again on its data \(pid (\d+)\)").group(1))
        assert new_redis != redis_pid
        up.healthy()
        redis_recovery_s = time.monotonic() - killed_at

        pg_pid = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
        os.kill(pg_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        up.wait_for_line(r"postgres stopped \(no postmaster on its data dir\); restarting in 1 s")
        new_pg = int(up.wait_for_line(r"started postgres again on its data \(pid (\d+)\)", timeout=120).group(1))
        assert new_pg != pg_pid
        assert int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0]) == new_pg
        up.healthy()
        pg_recovery_s = time.monotonic() - killed_at
        # The same data, and TCP with the password again.
        with psycopg.connect(tcp + " password='correct horse battery'") as conn:
            assert conn.execute("SELECT count(*) FROM auth_user WHERE username = 'admin'").fetchone() == (1,)

        # The healthy children reconnected by themselves: each was started once and none exited.
        started = [re.search(CHILD_STARTED, line).group(1) for line in up.lines if re.search(CHILD_STARTED, line)]
        assert sorted(started) == sorted(pids), started
        assert not any(re.search(CHILD_EXITED, line) for line in up.lines), up.lines
        print(f"recovery after SIGKILL: redis {redis_recovery_s:.1f} s, postgres {pg_recovery_s:.1f} s")

        # A child that dies is reported and restarted.
        os.killpg(pids["beat"], signal.SIGKILL)
        up.wait_for_line(r"beat exited with code -9; restarting in 1 s")
        new_beat = int(up.wait_for_line(r"started beat \(pid (\d+)\)").group(1))
        assert new_beat != pids["beat"]
        pids["beat again"] = new_beat

        # A sweep with two trials running, then Ctrl-C (below) and up again: tests/sweeps/restart_walk.py.
        sweep = restart_walk.start(data_dir, gate, settings)
    finally:
        code = up.stop()
    assert code == 0
    assert "stopped" in up.lines[-1]
    assert not [line for line in up.lines if re.search(PER_TASK, line)]
    assert not any("superuser privileges" in line for line in up.lines)
    # Every child and every server, the restarted ones too: none may outlive `up`.
    wait_for(lambda: processes_using(data_dir) == [], 10, "every child and server of up to be gone")
    for pid in pids.values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    restart_walk.after_ctrl_c(data_dir, sweep, gate, settings)

    # A second run starts on the kept data: same admin, no new password; --verbose prints every line; the sweep
    # goes on.
    again = Up(data_dir, free_port(), env=settings, args=["--verbose"])
    try:
        again.wait_for_line(rf"^ +up \| log in as admin \(password in {re.escape(str(data_dir))}/admin-password\)$")
        assert (data_dir / "admin-password").read_text().strip() == login
        again.wait_for_any_line(r"^ +worker \| INFO celery\.app\.trace: Task \S+ succeeded in")
        assert any(re.match(r"^ +beat \| INFO celery\.beat: Scheduler: Sending due task", line) for line in again.lines)
        restart_walk.after_up_again(data_dir, sweep, settings)
    finally:
        assert again.stop() == 0
    assert processes_using(data_dir) == []

"""`manage.py up` starts every part, supervises it, and leaves nothing behind on Ctrl-C.

A real subprocess with its own embedded PostgreSQL and Redis in a temp data dir. Starting one costs
tens of seconds, so a single `up` walks every scenario in turn: its start, a second `up` turned away,
its embedded Redis and PostgreSQL killed with SIGKILL (the way a crash or the OOM killer ends them)
and brought back on their data while the children stay, a dead child restarted, then Ctrl-C; a
second run then starts on the data it kept.
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
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

CHILD_STARTED = r"started (web|worker|jobs|beat|collector) "
CHILD_EXITED = r"(web|worker|jobs|beat|collector) exited"


def test_up_runs_every_part_restarts_a_dead_child_or_server_and_stops_them_all(service_dir):
    data_dir = service_dir / "data"
    pg_port = free_port()
    # Its PostgreSQL also listens on TCP for GPU nodes, as a control plane's does.
    up = Up(data_dir, free_port(), env={"YARDSTICK_PG_LISTEN": "127.0.0.1", "YARDSTICK_PG_PORT": str(pg_port),
                                        "YARDSTICK_PG_PASSWORD": "correct horse battery"})
    tcp = f"host=127.0.0.1 port={pg_port} user=postgres dbname=yardstick connect_timeout=5"
    pids = {}
    try:
        url = up.wait_for_line(r"GPU nodes: DATABASE_URL=(\S+)").group(1)
        assert url == f"postgresql://postgres:$YARDSTICK_PG_PASSWORD@127.0.0.1:{pg_port}/yardstick"
        for name in ("web", "worker", "jobs", "beat", "collector"):
            pids[name] = int(up.wait_for_line(rf"started {name} \(pid (\d+)\)").group(1))
        login = up.wait_for_line(r"Yardstick is at http://127\.0\.0\.1:\d+/ +log in as admin / (\S+)").group(1)
        assert (data_dir / "admin-password").read_text().strip() == login
        assert oct((data_dir / "admin-password").stat().st_mode & 0o777) == "0o600"

        up.healthy(timeout_s=20)  # a loaded machine answers a ping late
        status, body = up.health()
        for part in ("database", "broker", "worker", "beat", "collectors"):
            assert body["checks"][part]["ok"], (part, body)
        assert status == 200
        with psycopg.connect(tcp + " password='correct horse battery'") as conn:
            assert conn.execute("SELECT count(*) FROM auth_user WHERE username = 'admin'").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(tcp + " password=guess-guess-guess")

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
    finally:
        code = up.stop()
    assert code == 0
    assert "stopped" in up.lines[-1]
    # Every child and every server, the restarted ones too: none may outlive `up`.
    wait_for(lambda: processes_using(data_dir) == [], 10, "every child and server of up to be gone")
    for pid in pids.values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    # A second run starts on the kept data: same admin, no new password.
    again = Up(data_dir, free_port())
    try:
        line = again.wait_for_line(r"Yardstick is at .* log in as (.*)").group(1)
        assert line.startswith("admin (password in")
        assert (data_dir / "admin-password").read_text().strip() == login
    finally:
        assert again.stop() == 0
    assert processes_using(data_dir) == []

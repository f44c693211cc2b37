"""`manage.py up` owns the embedded servers of its data dir: it restarts one that died, on the same
data, and /healthz recovers; a command run meanwhile never starts or stops one.

A real `up` subprocess with its own embedded PostgreSQL and Redis; the servers
are killed with SIGKILL, the way a crash or the OOM killer ends them.
"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, free_port
from tests.platform.up_process import Up, processes_using
from tests.waiting import wait_for
from yardstick.embedded import EmbeddedPostgres, EmbeddedRedis, ServiceError
from yardstick.runner import DataDirLock
from yardstick.services import wait_for_servers_of_up

pytestmark = pytest.mark.slow


def test_up_restarts_a_killed_embedded_redis_and_postgres_and_healthz_recovers(service_dir):
    data_dir = service_dir / "data"
    up = Up(data_dir, free_port())
    try:
        up.wait_for_line(r"Yardstick is at http://")
        up.healthy()
        children_started = [line for line in up.lines if re.search(r"started (web|worker|jobs|beat|collector) ", line)]

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

        # The healthy children reconnected by themselves: none was restarted.
        assert [line for line in up.lines if re.search(r"started (web|worker|jobs|beat|collector) ", line)] \
            == children_started
        assert not any(re.search(r"(web|worker|jobs|beat|collector) exited", line) for line in up.lines)
        print(f"recovery after SIGKILL: redis {redis_recovery_s:.1f} s, postgres {pg_recovery_s:.1f} s")
    finally:
        code = up.stop()
    assert code == 0
    assert "stopped" in up.lines[-1]
    wait_for(lambda: processes_using(data_dir) == [], 10, "every server of up to be gone (none may outlive it)")


def test_a_command_run_while_up_holds_the_data_dir_waits_for_its_servers_and_leaves_them_running(service_dir):
    data_dir = service_dir / "data"
    data_dir.mkdir()
    lock = DataDirLock(data_dir)
    lock.acquire("http://127.0.0.1:1/")  # this test plays the `up` that owns the servers
    pg, rd = EmbeddedPostgres(data_dir), EmbeddedRedis(data_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    try:
        command = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"], cwd=ROOT,
            env={**env, "YARDSTICK_DATA_DIR": str(data_dir)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        time.sleep(4)
        assert command.poll() is None, command.communicate()[0]  # waiting, not failed
        assert not (data_dir / "postgres").exists(), "the command started a PostgreSQL of its own"

        pg.start()  # what `up`'s supervisor does
        pg.ensure_database()
        rd.start(daemonize=True)
        postmaster = pg.pid()
        output = command.communicate(timeout=240)[0]
        assert command.returncode == 0, output
        assert pg.pid() == postmaster and pg.accepts_connections(), "the command stopped up's PostgreSQL"
        assert rd.ping(), "the command stopped up's Redis"
    finally:
        rd.stop()
        pg.stop()
        lock.release()


def test_a_command_fails_naming_the_servers_and_the_up_that_owns_them_when_they_stay_down(service_dir):
    lock = DataDirLock(service_dir)
    lock.acquire("http://127.0.0.1:8000/")
    try:
        owner = DataDirLock(service_dir).held_by()
        assert owner == f"`manage.py up` (pid {os.getpid()}, http://127.0.0.1:8000/)"
        with pytest.raises(ServiceError, match=(
            r"^PostgreSQL \(socket in .*\) and Redis \(.*redis\.sock\) not answering after 1 s; "
            r"`manage.py up` \(pid \d+, http://127\.0\.0\.1:8000/\) owns the servers of this data dir "
            r"\(.*\), so this command neither starts nor stops them: see that `up`'s output for why they are down$"
        )):
            wait_for_servers_of_up(service_dir, owner, wait_s=1)
    finally:
        lock.release()
    assert DataDirLock(service_dir).held_by() is None
    assert not (service_dir / "postgres").exists()

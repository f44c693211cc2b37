"""`manage.py up` restarts an embedded server that died, on the same data, and /healthz recovers.

A real `up` subprocess with its own embedded PostgreSQL and Redis; the servers
are killed with SIGKILL, the way a crash or the OOM killer ends them.
"""

import os
import re
import signal
import time

import pytest

from tests.conftest import free_port
from tests.platform.test_up import Up

pytestmark = pytest.mark.slow


def seconds_until_healthy(up, timeout=60):
    """Seconds until /healthz answers 200 (every check ok); fail after `timeout`."""
    began = time.monotonic()
    status, body = None, None
    while time.monotonic() - began < timeout:
        try:
            status, body = up.health()
        except OSError:  # web not answering at all
            status, body = None, None
        if status == 200:
            return time.monotonic() - began
        time.sleep(0.5)
    raise AssertionError(f"/healthz still {status} after {timeout} s: {body}\n" + "\n".join(up.lines[-40:]))


def test_up_restarts_a_killed_embedded_redis_and_postgres_and_healthz_recovers(service_dir):
    data_dir = service_dir / "data"
    up = Up(data_dir, free_port())
    try:
        up.wait_for(r"Yardstick is at http://")
        seconds_until_healthy(up)
        children_started = [line for line in up.lines if re.search(r"started (web|worker|jobs|beat|collector) ", line)]

        redis_pid = int((data_dir / "redis" / "redis.pid").read_text())
        os.kill(redis_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        up.wait_for(r"redis exited with code -9; restarting in 1 s")
        new_redis = int(up.wait_for(r"started redis again on its data \(pid (\d+)\)").group(1))
        assert new_redis != redis_pid
        seconds_until_healthy(up)
        redis_recovery_s = time.monotonic() - killed_at

        pg_pid = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
        os.kill(pg_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        up.wait_for(r"postgres stopped \(no postmaster on its data dir\); restarting in 1 s")
        new_pg = int(up.wait_for(r"started postgres again on its data \(pid (\d+)\)", timeout=120).group(1))
        assert new_pg != pg_pid
        assert int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0]) == new_pg
        seconds_until_healthy(up)
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

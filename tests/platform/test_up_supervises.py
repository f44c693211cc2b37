"""`manage.py up` owns the embedded servers of its data dir: a command run meanwhile waits for them and
never starts or stops one, and says which `up` owns them when they stay down.

The test plays the `up` (it takes the data dir's lock and starts the servers itself); a real `up`
restarting the servers it owns after a SIGKILL is walked in test_up.py.
"""

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from yardstick.embedded import EmbeddedPostgres, EmbeddedRedis, ServiceError
from yardstick.runner import DataDirLock
from yardstick.services import wait_for_servers_of_up

pytestmark = pytest.mark.slow


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

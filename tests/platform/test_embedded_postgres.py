"""The embedded PostgreSQL starts on a machine that never ran it, and says why when it cannot.

As root the server runs as a system user that the first start creates. Two
processes starting at the same moment (the two workers of `make test` on a
fresh machine) used to race there: one ran initdb as a user not yet complete.
These tests make a system user of their own, so they meet the machine as a
first run does, whoever ran the suite before.
"""

import multiprocessing
import os
import pwd
import subprocess
import uuid

import pytest

from yardstick.embedded import EmbeddedPostgres, ServiceError


def _start_and_stop(data_dir, system_user, ready, results):
    server = EmbeddedPostgres(data_dir, system_user=system_user)
    ready.wait(timeout=60)  # all start together, as the workers of `make test` do
    try:
        server.start()
        results.put((str(data_dir), "started" if server.accepts_connections() else "started, no login"))
    except Exception as err:  # noqa: BLE001 - the parent reports whatever went wrong
        results.put((str(data_dir), f"failed: {err}"))
    finally:
        server.stop()


@pytest.fixture
def new_system_user():
    """A system user name that does not exist yet; removed (when created) at the end."""
    name = f"ys_pg_{uuid.uuid4().hex[:8]}"
    yield name
    if os.geteuid() == 0:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.mark.slow
def test_two_first_starts_at_the_same_moment_both_start(service_dir, new_system_user):
    context = multiprocessing.get_context("spawn")
    results, ready = context.Queue(), context.Barrier(3)
    starts = [context.Process(target=_start_and_stop,
                              args=(service_dir / f"pg{i}", new_system_user, ready, results))
              for i in range(3)]
    for process in starts:
        process.start()
    for process in starts:
        process.join(timeout=120)
    outcomes = dict(results.get(timeout=5) for _ in starts)
    assert sorted(outcomes.values()) == ["started"] * 3, outcomes
    if os.geteuid() == 0:
        # The server really ran as the new user, who owns each data dir.
        uid = pwd.getpwnam(new_system_user).pw_uid
        assert all((service_dir / f"pg{i}" / "postgres").stat().st_uid == uid for i in range(3))


def test_when_initdb_fails_its_own_words_are_in_the_error(service_dir, new_system_user):
    server = EmbeddedPostgres(service_dir / "pg", system_user=new_system_user)
    server.pgdata.mkdir(parents=True)
    (server.pgdata / "left-over").write_text("not a database")  # initdb refuses a non-empty folder
    with pytest.raises(ServiceError) as caught:
        server.start()
    message = str(caught.value)
    assert "initdb failed" in message
    assert "exists but is not empty" in message  # initdb's stderr, which the server log never has
    assert str(server.log_path) in message
    assert (server.pgdata / "left-over").read_text() == "not a database"  # nothing it found was touched

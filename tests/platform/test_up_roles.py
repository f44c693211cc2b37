"""`manage.py up --role ...`: which parts run on a machine, under which node name, and a control
plane's PostgreSQL that GPU nodes reach over TCP with a password.

The children for a set of roles are checked as command lines without starting them; one real
`up --role collector` joins the test database and Redis the way a GPU node joins a control plane.
"""

import os
import signal
import subprocess
import sys
import types

import pytest
from django.conf import settings

from collector.agent.sources import node_name
from collector.models import Node
from tests.conftest import ROOT, database_url, manage
from tests.platform.up_process import processes_using
from tests.waiting import wait_for
from yardstick.embedded import EmbeddedPostgres
from yardstick.runner import ROLES, RoleError, check_roles, children_for, parse_roles


def no_server_urls():
    """This process's environment without DATABASE_URL/REDIS_URL: an `up` that would use embedded servers."""
    return {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}


def test_parse_roles_keeps_each_named_role_once():
    assert parse_roles("jobs, collector,jobs") == ("jobs", "collector")
    assert parse_roles(",".join(ROLES)) == ROLES


def test_parse_roles_names_an_unknown_role_and_the_accepted_ones():
    with pytest.raises(RoleError, match=r"--role must be a comma-separated list of web, worker, beat, collector, "
                                        r"jobs, got 'jobs,gpu' \(unknown: 'gpu'\)"):
        parse_roles("jobs,gpu")
    with pytest.raises(RoleError, match="got ''"):
        parse_roles("")


def test_a_gpu_node_starts_a_jobs_worker_and_a_collector_under_its_node_name(settings):
    settings.YARDSTICK_URL = "http://plane.example:8000"  # the control plane's, which its launched runs report to
    settings.YARDSTICK_NODE = "gpu-node-7"
    settings.COLLECTOR_SOURCE = "nvml"
    children = children_for(settings, ("jobs", "collector"), "127.0.0.1", 8000)

    assert [c.name for c in children] == ["jobs", "launch", "collector"]
    jobs, launch, collector = children
    # The shared queue and its own, which carries the node name, as does the worker.
    assert jobs.argv[jobs.argv.index("-Q") + 1] == "jobs,jobs@gpu-node-7"
    assert jobs.argv[jobs.argv.index("-n") + 1] == "jobs@gpu-node-7"
    assert collector.argv[-5:] == ["collect", "--source", "nvml", "--node", "gpu-node-7"]
    # Recipes' commands: a thread each, on the node's own launch queue, reporting to this control plane.
    assert launch.argv[launch.argv.index("-Q") + 1] == "launch@gpu-node-7"
    assert launch.argv[launch.argv.index("--pool") + 1] == "threads"
    assert launch.env == {"YARDSTICK_URL": "http://plane.example:8000"}

    settings.YARDSTICK_POOL = "research"  # a team's pool: its own queue only, nothing from the shared one
    jobs = children_for(settings, ("jobs",), "127.0.0.1", 8000)[0]
    assert jobs.argv[jobs.argv.index("-Q") + 1] == "jobs@gpu-node-7"


def test_every_role_is_the_default_and_each_starts_its_own_child(settings):
    children = children_for(settings, ROLES, "0.0.0.0", 9000)

    assert [c.name for c in children] == ["web", "worker", "jobs", "launch", "beat", "collector"]
    assert children[0].argv[-7:] == ["-b", "0.0.0.0", "-p", "9000", "--websocket-max-message-size",
                                     str(32 * 2**20), "yardstick.asgi:application"]
    assert children[1].argv[children[1].argv.index("-Q") + 1] == "default"
    assert "beat" in children[4].argv
    assert children[5].argv[-4:-2] == ["--source", "host"]  # the default: this machine's CPU, anywhere


def test_roles_without_the_web_server_need_both_urls_of_the_control_plane():
    embedded_both = types.SimpleNamespace(EMBEDDED_DB=True, EMBEDDED_REDIS=True)
    with pytest.raises(RoleError, match=r"--role jobs,collector runs no web server, so it joins a control plane: "
                                        r"set DATABASE_URL and REDIS_URL"):
        check_roles(embedded_both, ("jobs", "collector"))
    with pytest.raises(RoleError, match=r"set REDIS_URL to"):
        check_roles(types.SimpleNamespace(EMBEDDED_DB=False, EMBEDDED_REDIS=True), ("jobs",))

    check_roles(embedded_both, ("web", "jobs"))  # the control plane itself: its embedded servers are fine
    check_roles(types.SimpleNamespace(EMBEDDED_DB=False, EMBEDDED_REDIS=False, YARDSTICK_URL="http://plane:8000"),
                ("jobs", "collector"))


def test_up_refuses_a_gpu_node_without_urls_before_starting_anything(service_dir):
    env = {**no_server_urls(), "YARDSTICK_DATA_DIR": str(service_dir)}

    result = manage("up", "--role", "jobs,collector", env=env, timeout=60)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "--role jobs,collector runs no web server, so it joins a control plane: set DATABASE_URL and REDIS_URL "
        "to the control plane's (its `up` prints its DATABASE_URL)"
    ]
    assert not (service_dir / "postgres").exists() and not (service_dir / "redis").exists()

    unknown = manage("up", "--role", "web,gpu", env=env, timeout=60)
    assert unknown.returncode == 2
    assert "(unknown: 'gpu')" in unknown.stderr


def test_up_refuses_to_listen_on_tcp_with_too_short_a_password(service_dir):
    env = {**no_server_urls(), "YARDSTICK_DATA_DIR": str(service_dir), "YARDSTICK_PG_LISTEN": "0.0.0.0",
           "YARDSTICK_PG_PASSWORD": "short"}

    result = manage("up", env=env, timeout=60)

    assert result.returncode == 1
    assert ("Configuration error: YARDSTICK_PG_LISTEN=0.0.0.0 opens the embedded PostgreSQL to TCP clients: "
            "set YARDSTICK_PG_PASSWORD (at least 12 characters, got 5)") in result.stderr
    assert not (service_dir / "postgres").exists()


def test_the_node_name_is_yardstick_node_else_the_host_name():
    import socket

    assert node_name({"YARDSTICK_NODE": " gpu-node-7 "}) == "gpu-node-7"
    assert node_name({}) == socket.gethostname()
    with pytest.raises(ValueError, match=r"YARDSTICK_NODE must be a name of at most 255 printable characters "
                                         r"without spaces, got 'gpu node'"):
        node_name({"YARDSTICK_NODE": "gpu node"})


def test_a_tracked_run_names_the_node_its_agent_reports():
    from yardstick_mlflow.context import run_context_tags

    assert run_context_tags({"YARDSTICK_NODE": "gpu-node-7"})["yardstick.host"] == "gpu-node-7"
    assert run_context_tags({})["yardstick.host"] == node_name({})


def test_the_embedded_postgresql_will_not_listen_on_tcp_without_a_password(service_dir):
    # Listening with the password is driven through a real `up` in test_up.py.
    with pytest.raises(ValueError, match="listening on 0.0.0.0 needs a password of at least 12 characters"):
        EmbeddedPostgres(service_dir / "pg", listen=("0.0.0.0",), password="short")


@pytest.mark.slow
def test_a_node_up_joins_the_control_plane_and_its_collector_reports_under_the_node_name(pg_dsn, service_dir):
    # --role collector, not jobs,collector: a Celery worker's start and stop would add ~10 s for the
    # same path (no embedded servers, no migration); the jobs worker's command line is checked above,
    # and the stint's node name in tests/trainer/test_runner.py.
    node = f"gpu-node-{os.getpid()}"
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL,
           "YARDSTICK_DATA_DIR": str(service_dir), "YARDSTICK_NODE": node, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "up", "--role", "collector"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: Node.objects.filter(name=node).exists(), 60, f"the collector to report node {node}")
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert f"running collector as node {node}; press Ctrl-C to stop" in output
    # It joined the servers it was given: no embedded server, no migration, no web server.
    assert "embedded" not in output and "applying migrations" not in output and "started web" not in output
    assert not (service_dir / "postgres").exists() and not (service_dir / "redis").exists()
    assert processes_using(service_dir) == []

"""One address for the control plane, everywhere a run is given it: `up` hands the address it serves (or
YARDSTICK_URL) to every part it starts, settings read it, and a launched run, on a node or submitted to Ray or
Slurm by the default worker's follower, reports there; nothing falls back to a port nobody chose (a Ray job once
sent its token to whatever answered on 8000)."""

import os
import subprocess
import sys
import types

import pytest

from launch.executor import LaunchError, run_variables
from tests.conftest import ROOT
from yardstick.runner import ROLES, RoleError, check_roles, children_for


def a_start():
    """(job, launch, run) as run_variables reads them."""
    return (types.SimpleNamespace(pk=7), types.SimpleNamespace(stop_grace_s=[30, 30], definition={"env": {}}),
            types.SimpleNamespace(run_id="r1", experiment=types.SimpleNamespace(name="walk")))


def test_every_part_up_starts_carries_the_address_it_serves(settings):
    settings.YARDSTICK_URL = ""

    for web_processes in (1, 3):
        children = children_for(settings, ROLES, "0.0.0.0", 8123, web_processes, listen_fd=9)
        assert {c.name: c.env.get("YARDSTICK_URL") for c in children} == {
            c.name: "http://127.0.0.1:8123" for c in children}
        assert {"worker", "launch", "beat"} <= {c.name for c in children}


def test_a_set_yardstick_url_is_the_address_every_part_carries(settings):
    settings.YARDSTICK_URL = "https://control.example"

    children = children_for(settings, ("jobs", "collector"), "127.0.0.1", 8000)

    assert [c.env["YARDSTICK_URL"] for c in children] == ["https://control.example"] * 3


def test_the_default_worker_gives_a_cluster_run_the_address_up_serves(settings):
    settings.YARDSTICK_URL = ""
    worker = next(c for c in children_for(settings, ROLES, "127.0.0.1", 8123) if c.name == "worker")
    env = {k: v for k, v in os.environ.items() if k != "YARDSTICK_URL"}

    # The worker's settings, as the follower that submits to Ray and Slurm reads them.
    got = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from launch.executor import control_plane_url; "
                               "print(control_plane_url())"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "yardstick.settings", **worker.env},
        capture_output=True, text=True, timeout=120)

    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "http://127.0.0.1:8123"


def test_a_run_reports_to_yardstick_url_and_is_refused_without_one(settings):
    settings.YARDSTICK_URL = "http://127.0.0.1:8123"
    assert run_variables(*a_start(), "ys_token", {})["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:8123"

    settings.YARDSTICK_URL = ""
    with pytest.raises(LaunchError, match=r"^YARDSTICK_URL is not set, so the run would not know where to report"):
        run_variables(*a_start(), "ys_token", {})


def test_a_machine_without_the_web_server_needs_the_control_planes_address_to_start_runs():
    joined = {"EMBEDDED_DB": False, "EMBEDDED_REDIS": False}

    with pytest.raises(RoleError, match=r"^--role jobs,collector runs no web server, so the runs it starts report to "
                                        r"the control plane's: set YARDSTICK_URL"):
        check_roles(types.SimpleNamespace(**joined, YARDSTICK_URL=""), ("jobs", "collector"))
    with pytest.raises(RoleError, match="set YARDSTICK_URL"):
        check_roles(types.SimpleNamespace(**joined, YARDSTICK_URL=""), ("worker",))

    check_roles(types.SimpleNamespace(**joined, YARDSTICK_URL=""), ("collector",))  # starts no run
    check_roles(types.SimpleNamespace(**joined, YARDSTICK_URL="http://plane:8000"), ("jobs", "collector"))


def test_no_token_is_issued_for_a_run_that_would_not_know_where_to_report(settings, db):
    from launch.executor import issue_token
    from yardstick.models import ApiToken

    settings.YARDSTICK_URL = ""
    with pytest.raises(LaunchError, match=r"^YARDSTICK_URL is not set"):
        issue_token(types.SimpleNamespace(pk=7))
    assert not ApiToken.objects.exists(), "a token nobody revokes would be left behind"

"""Each agent on a machine gets a spool directory of its own by default (named by its source and node), so a
second agent beside `up`'s collector starts without --spool-dir; two agents of one source and node would share
one, and the spool's lock still refuses the second."""

import os
import socket
import subprocess
import sys

from collector.agent.cli import spool_dir
from tests.conftest import ROOT, database_url, manage
from tests.waiting import wait_for


def test_the_default_spool_dir_is_named_by_the_agents_source_and_node():
    assert spool_dir({"source": "host", "node": "gpu-07"}) == "var/collector-spool/host-gpu-07"
    assert spool_dir({"source": "dcgm", "node": "rack 1/gpu"}, root="/d") == "/d/dcgm-rack_1_gpu"
    assert spool_dir({"source": "sim", "node": None}, root="/d") == f"/d/sim-{socket.gethostname()}"
    assert spool_dir({"source": "sim", "spool_dir": "/var/lib/spool"}, root="/d") == "/var/lib/spool"


def test_a_second_agent_beside_a_running_one_takes_its_own_spool_and_a_twin_is_refused(telemetry_dsn, tmp_path):
    agent = [sys.executable, "-m", "collector.agent", "--dsn", telemetry_dsn, "--interval", "0.05"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # As `up`'s collector runs: this machine's CPU under the node's name.
    first = subprocess.Popen([*agent, "--source", "host", "--node", "plane"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lock = tmp_path / "var" / "collector-spool" / "host-plane" / "agent.lock"
    try:
        wait_for(lambda: lock.exists() and lock.read_text().strip() == str(first.pid), 30, "the first agent's claim")

        fleet = subprocess.run([*agent, "--source", "sim", "--gpus", "2", "--ticks", "3"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60)
        twin = subprocess.run([*agent, "--source", "host", "--node", "plane", "--ticks", "3"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=60)
    finally:
        first.terminate()
        first.wait(timeout=20)

    assert fleet.returncode == 0, fleet.stdout + fleet.stderr
    assert f"spool var/collector-spool/sim-{socket.gethostname()}" in fleet.stdout
    assert twin.returncode == 2
    assert (f"spool directory var/collector-spool/host-plane is in use by another agent (pid {first.pid})"
            in twin.stdout)
    assert first.returncode == 0


def test_manage_py_collect_keeps_each_agents_spool_in_the_data_dir(pg_dsn, tmp_path):
    result = manage("collect", "--source", "sim", "--gpus", "1", "--ticks", "1", "--node", "sim-a",
                    env={"DATABASE_URL": database_url(), "YARDSTICK_DATA_DIR": str(tmp_path)})

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"spool {tmp_path}/collector-spool/sim-sim-a" in result.stdout
    assert (tmp_path / "collector-spool" / "sim-sim-a" / "agent.lock").exists()

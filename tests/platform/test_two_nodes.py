"""Two nodes on one machine: a control plane `up --role web,jobs,collector` (what this needs: its API, a jobs
worker the job must not go to, a device that must not be charged; every role at once is test_up's), and a GPU
node's `up --role jobs,collector` with another node name, joined to the control plane's PostgreSQL and Redis
by DATABASE_URL and REDIS_URL. A job asked for the second node runs on that node's worker, its stints name that node, and its cost is
charged to that node's device. Jobs and costs are read back through the control plane's HTTP API.

Both `up`s join the test's own servers (the control plane's embedded PostgreSQL on TCP, which a real
second machine would use, is covered in test_up_roles.py); that spares this test an initdb and a full
migration, so it costs about what one `up` does.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone

from tests.conftest import ROOT, database_url
from tests.costs.cost_builders import set_prices
from tests.platform.up_process import processes_using
from tests.trainer.helpers import TINY, purge_jobs_queue
from tests.waiting import wait_for

SERVICE_VARS = ("DATABASE_URL", "REDIS_URL", "YARDSTICK_DATA_DIR", "YARDSTICK_NODE", "YARDSTICK_POOL")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_models(path):
    """A tiny base policy for arithmetic where the nodes' jobs look for it, so a job takes seconds."""
    from trainer.rl.model import GPTConfig
    from trainer.rl.pretrain import pretrain

    pretrain("arithmetic", path, "cpu", model_config=GPTConfig(n_layer=1, n_head=2, n_embd=32),
             max_steps=30, batch_size=32, target_pass1=101.0, probe_every=1000, probe_size=4)


def up(role_args, node, data_dir, log_path, **more_env):
    """`manage.py up` as `node`, joined to the test's servers, in a process group of its own."""
    env = {**{k: v for k, v in os.environ.items() if k not in SERVICE_VARS}, "PYTHONUNBUFFERED": "1",
           "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL, "YARDSTICK_DATA_DIR": str(data_dir),
           "YARDSTICK_NODE": node, **more_env}
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "up", *role_args], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc):
    """Ctrl-C, as a person stops `up`; its exit status."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


class Api:
    def __init__(self, base, token):
        self.base, self.token = base, token

    def __call__(self, path, body=None):
        req = urllib.request.Request(self.base + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())
        except OSError:
            return None, None  # not answering yet


@pytest.mark.slow
def test_a_job_asked_for_a_node_runs_there_names_it_and_is_charged_to_its_device(pg_dsn, tmp_path, operator,
                                                                                 api_token):
    from collector import store
    from collector.models import LatestSample, Sample
    from costs.attribution import attribute_window

    # Prices of its own: an earlier transactional test's flush empties the price book the migration filled.
    set_prices(("*", "3.60", "0.10", "1", date(2020, 1, 1)))
    models = tmp_path / "models"
    tiny_models(models)
    plane_dir, node_dir = tmp_path / "plane", tmp_path / "node"
    for d in (plane_dir, node_dir):
        d.mkdir()
        (d / "models").symlink_to(models, target_is_directory=True)
    purge_jobs_queue()  # a message left by another test would go to the plane's worker
    port = free_port()
    plane_log, node_log = tmp_path / "plane.log", tmp_path / "node.log"
    procs = [up(["--port", str(port), "--role", "web,jobs,collector"], "plane", plane_dir, plane_log),
             up(["--role", "jobs,collector"], "node-b", node_dir, node_log, YARDSTICK_URL=f"http://127.0.0.1:{port}")]
    logs = [plane_log, node_log]
    try:
        token = api_token(operator)
        api = Api(f"http://127.0.0.1:{port}", token)

        def workers():
            listed = {w["name"]: w for w in (api("/api/workers")[1] or {}).get("workers", [])}
            return listed if {"jobs@plane", "jobs@node-b"} <= set(listed) else None

        seen = wait_for(workers, 120, "both jobs workers to report", every_s=0.5, logs=logs)
        # node-b's device has telemetry before its job starts: the cost engine charges time it measured.
        wait_for(lambda: LatestSample.objects.filter(device__node__name="node-b").exists(), 60,
                 "node-b's collector to report", every_s=0.5, logs=logs)
        assert (seen["jobs@node-b"]["node"], seen["jobs@node-b"]["queues"]) == ("node-b", ["jobs", "jobs@node-b"])
        assert (seen["jobs@plane"]["node"], seen["jobs@plane"]["queues"]) == ("plane", ["jobs", "jobs@plane"])

        status, job = api("/api/jobs", {"name": "on b", "team": "research", "env": "arithmetic",
                                        "config": {**TINY, "steps": 4}, "node": "node-b"})
        assert status == 201 and job["placed_on"] == "jobs@node-b", job
        status, refused = api("/api/jobs", {"name": "on z", "team": "research", "env": "arithmetic",
                                            "config": {**TINY, "steps": 4}, "node": "node-z"})
        assert (status, refused["field"]) == (400, "node")
        assert "jobs@node-b on node-b" in refused["error"] and "jobs@plane on plane" in refused["error"]

        def ended():
            j = api(f"/api/jobs/{job['id']}")[1]
            return j if j["status"] in ("completed", "failed") else None

        done = wait_for(ended, 180, f"job {job['id']} to end", every_s=0.5, logs=logs)
        assert done["status"] == "completed", done["error"]
        assert [s["node"] for s in done["stints"]] == ["node-b"]
        # Each part's whole output is in its log file; the terminal has the job's start and end.
        assert "trainer.tasks.run_job[" in (node_dir / "log" / "jobs.log").read_text(), "node-b's worker ran it"
        assert "trainer.tasks.run_job[" not in (plane_dir / "log" / "jobs.log").read_text(), "the plane's did not"
        terminal = node_log.read_text()
        assert f"INFO trainer.runner: job {job['id']} (on b) started on node-b, device cpu" in terminal
        assert f"INFO trainer.runner: job {job['id']} (on b) ended completed after 4 steps" in terminal
        # The minutes it ran in are measured before node-b stops: its collector writes a sample after the end.
        ended_at = datetime.fromisoformat(done["stints"][0]["ended_at"])
        wait_for(lambda: Sample.objects.filter(device__node__name="node-b", ts__gt=ended_at).exists(), 60,
                 "node-b's collector to report after the job ended", every_s=0.5, logs=logs)
    finally:
        codes = [stop(p) for p in procs]
    assert codes == [0, 0], [p.read_text()[-3000:] for p in logs]
    assert processes_using(plane_dir) == [] and processes_using(node_dir) == []

    # Its cost lands on node-b's device. The periodic attribution charges closed minutes only; charge
    # the job's minutes now, as the next runs would.
    store.roll_up()
    attribute_window(timezone.now() - timedelta(minutes=10), timezone.now() + timedelta(minutes=2),
                     now=timezone.now() + timedelta(minutes=2))
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    by_node = {r["key"]: r for r in client.get("/api/costs?group=node").json()["rows"]}
    # Unrounded: a tiny job's cost is a fraction of a cent.
    assert Decimal(by_node["node-b"]["attributed_exact_usd"]) > 0, by_node
    assert Decimal(by_node["plane"]["attributed_exact_usd"]) == 0

"""A launch worker that dies takes its runs with it: no process of a launched command outlives it, and its job
fails at once (the guard, launch/guard.py), not minutes later when the heartbeat check would find it."""

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from launch.models import Launch
from sweeps.models import Sweep
from tests.conftest import ROOT, database_url
from tests.waiting import wait_for
from trainer.models import Job, Worker

pytestmark = pytest.mark.slow


@pytest.fixture
def worker_process(transactional_db, live_server, launch_data_dir, settings, tmp_path):
    """A real launch worker process (`celery worker --pool threads`), as `up` starts it, on the test database."""
    name = f"launch@{settings.YARDSTICK_NODE}"
    env = {**os.environ, "YARDSTICK_DATA_DIR": str(launch_data_dir), "DATABASE_URL": database_url(),
           "REDIS_URL": settings.REDIS_URL, "YARDSTICK_URL": live_server.url, "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "worker.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "yardstick", "worker", "-Q", name, "-n", name,
                             "--pool", "threads", "--concurrency", "4", "--without-heartbeat", "--without-mingle",
                             "--without-gossip", "--loglevel", "INFO"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = tmp_path / "worker.log"
    wait_for(lambda: Worker.objects.filter(name=name).exists(), timeout_s=60,
             what=lambda: f"the worker to report; its log: {proc.log.read_text()[-2000:]}")
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()


def guards(pgid):
    """The guard processes of the run whose process group is `pgid` (other tests' runs have theirs)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "launch.guard" in cmdline and str(pgid) in cmdline[cmdline.index("launch.guard") + 1:][:1]:
            found.append(proc.pid)
    return found


def test_killing_the_worker_kills_every_process_of_the_run_and_fails_the_job_at_once(
        worker_process, recipe, operator, client):
    # A run that starts a child in a session of its own (as some launchers do): the group alone would miss it.
    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
              "print('child', child.pid, flush=True)\ntime.sleep(600)\n")
    recipe("sleeper", [sys.executable, "-c", script, "{x}"],
           params=[{"name": "x", "kind": "float", "default": 0.5, "minimum": 0.0, "maximum": 1.0, "help": "x"}])
    client.force_login(operator)
    # A sweep's trial: the job's end frees its device, and a process that sees it end would start the next trial.
    body = {"name": "s", "team": "research", "recipe": "sleeper", "space": {"x": {"low": 0.0, "high": 1.0}},
            "budget_usd": "5", "parallel": 1, "max_trials": 2}
    resp = client.post("/api/sweeps", json.dumps(body), content_type="application/json")
    assert resp.status_code == 201, resp.content
    sweep = Sweep.objects.get(pk=resp.json()["id"])
    job_id = sweep.trials.get().job_id
    child = wait_for(lambda: next((int(t.split()[1]) for s, t in Job.objects.get(pk=job_id).output_lines
                                   .values_list("stream", "text") if t.startswith("child ")), None),
                     timeout_s=60, what=lambda: f"the run to start; worker log: {worker_process.log.read_text()[-3000:]}")
    leader = Launch.objects.get(pk=job_id).pid
    assert psutil.pid_exists(leader) and psutil.pid_exists(child)

    os.killpg(worker_process.pid, signal.SIGKILL)  # the worker and everything in its process group
    worker_process.wait()

    job = wait_for(lambda: Job.objects.filter(pk=job_id, status="failed").first(), timeout_s=20,
                   what="the job to fail")
    assert "its launch worker" in job.error and "died; the guard killed the run's processes" in job.error
    for pid in (leader, child):
        wait_for(lambda pid=pid: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
                 timeout_s=10, what=f"process {pid} to be gone")
    assert job.stints.get().end_reason == "crashed"
    # The guard cleans up and starts nothing (its worker may have died in a stopping `up`): the sweep's next trial is
    # for the passes of the parts that live.
    wait_for(lambda: not guards(leader), timeout_s=20, what="the guard to end")
    assert job.interrupted and sweep.trials.count() == 1


def test_a_warm_shutdown_stops_its_runs_through_their_stop_flag(worker_process, recipe, operator, client):
    from tests.launch.test_launch_run import STEPS, STEPS_PARAMS

    recipe("steps", STEPS, params=STEPS_PARAMS, resume_argv=["--from", "{checkpoint}"], stop_grace_s=[5, 5])
    client.force_login(operator)
    resp = client.post("/api/launch", '{"recipe": "steps", "team": "research", "params": {"steps": 1000}}',
                       content_type="application/json")
    job_id = resp.json()["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).steps_done >= 2, timeout_s=60,
             what=lambda: f"two steps; worker log: {worker_process.log.read_text()[-3000:]}")

    worker_process.send_signal(signal.SIGTERM)  # what `up` sends its children on Ctrl-C or a deploy
    assert worker_process.wait(timeout=60) == 0

    job = Job.objects.get(pk=job_id)
    assert job.status == "stopped", (job.status, job.error)
    assert [c.to_status for c in job.status_changes.all()] == ["queued", "running", "stopping", "stopped"]
    assert "by worker shutting down" in job.status_changes.get(to_status="stopping").reason
    assert "the run ended itself at its stop flag" in job.status_changes.last().reason
    assert Launch.objects.get(pk=job_id).checkpoints[-1] == f"step_{job.steps_done}"

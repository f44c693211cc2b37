"""A real TRL GRPOTrainer run reporting to Yardstick through MLflow, end to end.

The run is a user's script in its own process (`python -m tests.trl_tiny`: a
tiny random GPT-2 and a character tokenizer built in code, no hub) with only
the two variables a user sets, MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN,
transformers' own `report_to=["mlflow"]` and yardstick_mlflow's StopCallback.
The real node agent (host source) runs beside it and records which processes
hold this machine's CPU; the run is matched to that device from the tags the
package's run-context provider set. An operator then presses Stop on the job
page in Chromium and the training process ends itself, its run KILLED.
"""

import os
import re
import signal
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, shot, user_in_role
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = "tiny-grpo"


def _spawn(argv, log, env):
    out = open(log, "w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log_file = out
    return proc


def _end(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    proc.log_file.close()


@pytest.fixture
def host_agent(pg_dsn, tmp_path):
    """The real node agent, host source, one tick a second, on the test database."""
    log = tmp_path / "agent.log"
    proc = _spawn([sys.executable, "-m", "collector.agent", "--dsn", pg_dsn, "--source", "host", "--interval", "1",
                   "--spool-dir", str(tmp_path / "spool")], log, {**os.environ, "PYTHONUNBUFFERED": "1"})
    proc.log = log
    yield proc
    _end(proc)


@pytest.fixture
def trl_training(live_server, api_token, reporter, tmp_path):
    """Start a user's TRL GRPO script reporting to this server with a reporter's token; yields its process."""
    log = tmp_path / "trl.log"
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": live_server.url,
        "MLFLOW_TRACKING_TOKEN": api_token(reporter),
        "MLFLOW_EXPERIMENT_NAME": EXPERIMENT,
        "YARDSTICK_STOP_CHECK_S": "0.5",  # ask Yardstick often: the test waits for the stop
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONUNBUFFERED": "1",
    }
    proc = _spawn([sys.executable, "-m", "tests.trl_tiny", str(tmp_path / "trl-out")], log, env)
    proc.log = log
    yield proc
    _end(proc)


def test_it_charts_a_real_trl_grpo_run_matches_its_process_to_the_host_and_stops_it_from_the_job_page(  # noqa: F811
        host_agent, trl_training, live_server, page, django_user_model, output_dir, request):
    from collector.models import DeviceHolder
    from tracking.matching import match_runs
    from tracking.models import Run
    from trainer.models import Status

    logs = (trl_training.log, host_agent.log)

    def run():
        return Run.objects.select_related("job", "experiment").filter(experiment__name=EXPERIMENT).first()

    first = wait_for(run, 90, "the TRL run to appear", every_s=0.5, logs=logs)
    job_id = first.job_id
    # steps_done is the highest step logged, what the page shows (a first log at step 0 counts as a row, not a step).
    wait_for(lambda: run().job.steps.count() >= 2 and run().job.steps_done >= 2, 90, "two GRPO steps logged",
             every_s=0.5, logs=logs)
    r = run()
    tags = {t.key: t.value for t in r.tags.all()}
    assert (r.status, r.job.status, r.job.source, r.job.framework) == ("RUNNING", Status.RUNNING, "external", "trl")
    assert tags["yardstick.host"] == socket.gethostname() and tags["yardstick.pid"] == str(trl_training.pid)
    step = r.job.steps.order_by("step").last()
    assert {"reward", "kl", "completions/mean_length", "train/reward_mean", "train/kl"} <= set(step.metrics)

    # The agent's host scan (every 10 s) names the training process a holder of this machine's CPU; a sighting
    # from before the run started (the script loading its model) does not count for the run.
    started = datetime.fromtimestamp(r.start_time / 1000, tz=timezone.utc)
    wait_for(lambda: DeviceHolder.objects.filter(pid=trl_training.pid, device__source="host",
                                                 last_seen__gte=started).exists(), 60,
             "the agent to see the training process hold the CPU since the run started", every_s=0.5, logs=logs)
    match_runs()  # what the tracking.match_runs task does every 30 s
    stint = r.job.stints.get()
    assert (stint.node, stint.device, stint.pid, stint.ended_at) == (socket.gethostname(), "cpu", trl_training.pid,
                                                                     None)

    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", f"/jobs/{job_id}?live=0")
    assert int(page.inner_text("#steps-done")) >= 2
    assert "external · trl" in page.inner_text("main")
    stints = page.inner_text("#stints-body")
    assert socket.gethostname() in stints and "running" in stints
    shot(page, output_dir, request, "running")
    page.screenshot(path=str(output_dir / f"{request.node.name}-top.png"))  # the viewport: figures and progress

    page.locator(f'[data-job-controls="{job_id}"] .job-stop-form button').click()
    page.wait_for_url(f"{live_server.url}/jobs/{job_id}?live=0")
    # The press is recorded at once; the run may already have heard it and ended by now (it asks every 0.5 s).
    assert run().job.status_changes.filter(to_status=Status.STOPPING, reason="stop requested by otto").exists()

    # The script's StopCallback hears it at its next step and ends training: the process exits by itself.
    assert trl_training.wait(timeout=90) == 0, trl_training.log.read_text()[-4000:]
    r = run()
    assert (r.status, r.job.status) == ("KILLED", Status.STOPPED)
    trained = int(re.search(r"trained (\d+) steps", trl_training.log.read_text()).group(1))
    assert r.job.steps_done == trained >= 2 and r.end_time is not None, "the run ends with its last step"
    match_runs()
    assert r.job.stints.get().ended_at is not None, "the run's end ends its stint"

    page.goto(f"{live_server.url}/jobs/{job_id}?live=0")
    assert "stopped" in page.inner_text("main").lower()
    assert not page.locator(f'[data-job-controls="{job_id}"] .job-stop-form button').is_visible()

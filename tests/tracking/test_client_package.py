"""The yardstick-mlflow package (client/) with the real mlflow client against a live Yardstick:
run tags that find the run's GPUs, and Stop from Yardstick ending training (plain loop and transformers)."""

import os
import socket
import subprocess
import sys

import pytest

from tracking.models import Run

# Started like a training script: a run through the fluent API (no Yardstick code in it), then a
# worker process (a rank) that the script waits on.
SCRIPT = (
    "import subprocess, sys, mlflow\n"
    "mlflow.set_experiment('package')\n"
    "run = mlflow.start_run()\n"
    "rank = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(run.info.run_id, rank.pid, flush=True)\n"
    "sys.stdin.readline()\n"
    "rank.kill()\n"
    "mlflow.end_run()\n"
)


@pytest.fixture
def training_env(live_server, api_token, reporter):
    return {**os.environ, "MLFLOW_TRACKING_URI": live_server.url, "MLFLOW_TRACKING_TOKEN": api_token(reporter),
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "TORCHELASTIC_RUN_ID": "elastic-1", "SLURM_JOB_ID": "4242",
            "RAY_JOB_ID": "02000000"}


def test_a_run_started_by_the_real_client_carries_its_host_pids_and_launcher_ids_and_finds_its_rank(training_env):
    from django.db import connection
    from django.utils import timezone

    from collector.agent.batch import Batch, DeviceInfo
    from collector.agent.lineage import Lineages
    from collector.agent.writer import Writer
    from tracking.matching import match_runs

    script = subprocess.Popen([sys.executable, "-c", SCRIPT], env=training_env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        run_id, rank_pid = script.stdout.readline().split()
        # The node agent sees the rank on a GPU of this host, lineage and all.
        gpu = DeviceInfo("GPU-package-0", socket.gethostname(), 0, "NVIDIA H100 80GB HBM3", "nvml")
        holder = Lineages().holder(int(rank_pid), 2048)
        connection.ensure_connection()
        Writer(connection.connection).write(Batch([gpu], [], holders=[(gpu.uuid, timezone.now(), holder)]))
        match_runs()
    finally:
        script.communicate("\n", timeout=60)
    match_runs()  # after the run ended

    run = Run.objects.get(run_id=run_id)
    tags = {t.key: t.value for t in run.tags.filter(key__startswith="yardstick.")}
    assert tags == {
        "yardstick.host": socket.gethostname(), "yardstick.pid": str(script.pid), "yardstick.ppid": str(os.getpid()),
        "yardstick.torchelastic_run_id": "elastic-1", "yardstick.slurm_job_id": "4242",
        "yardstick.ray_job_id": "02000000",
    }
    [stint] = run.job.stints.all()
    assert (stint.node, stint.device, stint.pid) == (socket.gethostname(), "GPU-package-0", int(rank_pid))
    assert stint.ended_at is not None  # the run ended, and its stint with it (the package's run ended FINISHED)


def test_should_stop_says_so_after_an_operator_stops_the_job_and_the_loop_ends_the_run_killed_at_its_last_step(
        mlflow_client, operator, monkeypatch):
    import mlflow

    import yardstick_mlflow

    monkeypatch.setenv("YARDSTICK_STOP_CHECK_S", "0")
    mlflow.set_experiment("loop")
    run = mlflow.start_run()
    job = Run.objects.get(run_id=run.info.run_id).job
    steps = 0
    for step in range(1, 50):
        mlflow.log_metric("reward", step / 10, step=step)
        steps = step
        if step == 3:
            job.request_stop(by=operator)  # what the Stop button does
        if yardstick_mlflow.should_stop():
            yardstick_mlflow.end_killed()
            break

    assert steps == 3
    assert mlflow_client.get_run(run.info.run_id).info.status == "KILLED"
    job.refresh_from_db()
    assert (job.status, job.steps_done) == ("stopped", 3)


def test_should_stop_asks_yardstick_at_most_once_per_interval(mlflow_client, operator, monkeypatch):
    import mlflow

    import yardstick_mlflow

    monkeypatch.setenv("YARDSTICK_STOP_CHECK_S", "3600")
    run = mlflow.start_run(experiment_id="0")
    assert yardstick_mlflow.should_stop() is False  # asked
    Run.objects.get(run_id=run.info.run_id).job.request_stop(by=operator)

    assert yardstick_mlflow.should_stop() is False  # not asked again within the hour
    assert yardstick_mlflow.should_stop(run.info.run_id) is False
    monkeypatch.setenv("YARDSTICK_STOP_CHECK_S", "0")
    assert yardstick_mlflow.should_stop() is True


def test_the_transformers_callback_stops_a_trainer_after_the_step_stop_was_pressed_and_ends_its_run_killed(
        mlflow_client, operator, monkeypatch, tmp_path):
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    import yardstick_mlflow

    monkeypatch.setenv("YARDSTICK_STOP_CHECK_S", "0")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "trainer")

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(1, 1)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.w(x), labels)}

    class PressStop(TrainerCallback):
        """The operator presses Stop in the browser during step 3."""

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                run = Run.objects.get(run_id=__import__("mlflow").active_run().info.run_id)
                run.job.request_stop(by=operator)

    data = [{"x": torch.tensor([float(i)]), "labels": torch.tensor([2.0 * i])} for i in range(64)]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=40, per_device_train_batch_size=2, logging_steps=1,
                             report_to=["mlflow"], use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=data,
                      callbacks=[PressStop(), yardstick_mlflow.StopCallback()])
    trainer.train()

    assert trainer.state.global_step == 3
    run = Run.objects.get(experiment__name="trainer")
    assert run.status == "KILLED"
    run.job.refresh_from_db()
    assert (run.job.status, run.job.steps_done) == ("stopped", 3)

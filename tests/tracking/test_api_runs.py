"""The tracking API's runs, driven by the real mlflow client (fluent API and MlflowClient) against a live server."""

import math

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from trainer.models import Job, Step
from tracking.models import Metric, Run


def test_a_fluent_run_is_an_external_job_that_follows_the_runs_status(mlflow_client):
    mlflow.set_experiment("grpo-gsm8k")
    with mlflow.start_run(run_name="trl-grpo-1") as run:
        mlflow.log_params({"num_generations": 8, "max_steps": 20, "learning_rate": 1e-6})
        mlflow.set_tags({"team": "reasoning"})
        mlflow.log_metrics({"reward": 0.25, "kl": 0.01}, step=1)
        job = Run.objects.get(run_id=run.info.run_id).job
        assert (job.source, job.status, job.framework, job.name) == ("external", "running", "trl", "trl-grpo-1")
    job.refresh_from_db()
    assert job.status == "completed"
    assert job.steps_total == 20 and job.steps_done == 1
    got = mlflow_client.get_run(run.info.run_id)
    assert got.info.status == "FINISHED" and got.info.end_time
    assert got.data.params["num_generations"] == "8"
    assert got.data.metrics == {"reward": 0.25, "kl": 0.01}
    assert got.data.tags["mlflow.runName"] == "trl-grpo-1"
    step = Step.objects.get(job=job, step=1)
    assert step.metrics["train/reward_mean"] == 0.25 and step.metrics["train/kl"] == 0.01
    assert step.reward_mean == 0.25

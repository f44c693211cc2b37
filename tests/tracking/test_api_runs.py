"""The tracking API's runs, driven by the real mlflow client (fluent API and MlflowClient) against a live server."""

import math

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from tracking.models import Metric, Run
from trainer.models import Job, Step


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


def test_a_trl_run_whose_generic_params_arrive_first_is_still_named_trl(mlflow_client):
    """transformers' MLflowCallback logs a run's params in batches; the batch naming TRL may come second."""
    mlflow.set_experiment("grpo-batches")
    with mlflow.start_run(run_name="trl-grpo-2") as run:
        mlflow.log_params({"per_device_train_batch_size": 8, "learning_rate": 1e-6})
        job = Run.objects.get(run_id=run.info.run_id).job
        assert job.framework == "transformers"
        mlflow.log_params({"num_generations": 8, "max_completion_length": 64})
        job.refresh_from_db()
        assert job.framework == "trl"
        mlflow.log_params({"per_device_eval_batch_size": 8})  # a later generic batch does not undo it
        job.refresh_from_db()
        assert job.framework == "trl"


def test_every_logging_call_stores_what_the_client_reads_back(mlflow_client):
    exp = mlflow_client.create_experiment("calls")
    run = mlflow_client.create_run(exp, run_name="r1", tags={"stage": "dev"})
    rid = run.info.run_id
    mlflow_client.log_metric(rid, "loss", 2.5, timestamp=1_700_000_000_000, step=3)
    mlflow_client.log_metric(rid, "loss", float("nan"), timestamp=1_700_000_000_001, step=4)
    mlflow_client.log_metric(rid, "loss", 1.5, timestamp=1_700_000_000_002, step=5)
    mlflow_client.log_param(rid, "lr", "1e-5")
    mlflow_client.log_param(rid, "lr", "1e-5")  # the same value again is allowed, as in MLflow
    mlflow_client.set_tag(rid, "note", "hello")
    mlflow_client.delete_tag(rid, "stage")
    mlflow_client.log_batch(rid, metrics=[mlflow.entities.Metric("kl", float("inf"), 1, 1)],
                            params=[mlflow.entities.Param("beta", "0.04")], tags=[mlflow.entities.RunTag("a", "b")])
    got = mlflow_client.get_run(rid)
    assert got.data.metrics["loss"] == 1.5 and got.data.metrics["kl"] == math.inf
    assert got.data.params == {"lr": "1e-5", "beta": "0.04"}
    assert got.data.tags["note"] == "hello" and got.data.tags["a"] == "b" and "stage" not in got.data.tags
    history = mlflow_client.get_metric_history(rid, "loss")
    assert [(m.step, m.timestamp) for m in history] == [(3, 1_700_000_000_000), (4, 1_700_000_000_001),
                                                        (5, 1_700_000_000_002)]
    assert math.isnan(history[1].value)
    assert got.info.artifact_uri == f"mlflow-artifacts:/{exp}/{rid}/artifacts"


def test_a_run_resumed_by_its_id_continues_the_same_job(mlflow_client, monkeypatch):
    mlflow.set_experiment("resume")
    with mlflow.start_run() as first:
        mlflow.log_metric("reward", 0.1, step=1)
        mlflow.end_run(status="KILLED")
    job = Run.objects.get(run_id=first.info.run_id).job
    job.refresh_from_db()
    assert job.status == "stopped"
    monkeypatch.setenv("MLFLOW_RUN_ID", first.info.run_id)  # how veRL and NeMo RL resume
    with mlflow.start_run() as again:
        assert again.info.run_id == first.info.run_id
        job.refresh_from_db()
        assert job.status == "running"
        mlflow.log_metric("reward", 0.2, step=2)
    job.refresh_from_db()
    assert job.status == "completed" and job.steps_done == 2
    assert Job.objects.filter(source="external").count() == 1
    assert list(Step.objects.filter(job=job).values_list("step", "reward_mean")) == [(1, 0.1), (2, 0.2)]


def test_a_failed_run_fails_its_job_and_async_metrics_arrive(mlflow_client):
    mlflow.set_experiment("async")
    with pytest.raises(RuntimeError), mlflow.start_run() as run:
        for step in range(1, 4):  # transformers' MLflowCallback logs this way, from a background thread
            mlflow.log_metrics({"reward": step / 10, "num_tokens": 100.0 * step}, step=step, synchronous=False)
        mlflow.flush_async_logging()
        raise RuntimeError("training crashed")
    job = Run.objects.get(run_id=run.info.run_id).job
    assert job.status == "failed"
    assert list(Step.objects.filter(job=job).values_list("step", "gen_tokens")) == [(1, 100), (2, 100), (3, 100)]


@pytest.mark.parametrize("call, code, says", [
    (lambda c, rid: c.log_metric(rid, "bad@key", 1.0), "INVALID_PARAMETER_VALUE",
     "Invalid value \"bad@key\" for parameter 'name' supplied: Names may only contain"),
    (lambda c, rid: c.log_param(rid, "lr", "0.2"), "INVALID_PARAMETER_VALUE", "Changing param values is not allowed"),
    (lambda c, rid: c.log_param(rid, "big", "x" * 6001), "INVALID_PARAMETER_VALUE",
     "'Param value' exceeds the maximum length of 6000 characters"),
    (lambda c, rid: c.get_run("0" * 32), "RESOURCE_DOES_NOT_EXIST", "not found"),
    (lambda c, rid: c.delete_tag(rid, "nope"), "RESOURCE_DOES_NOT_EXIST", "No tag with name: nope"),
    (lambda c, rid: c.create_experiment("bad"), "RESOURCE_ALREADY_EXISTS", "Experiment(name=bad) already exists."),
    (lambda c, rid: c.get_experiment_by_name("nope"), None, None),
])
def test_bad_input_gets_mlflows_error_and_stores_nothing(mlflow_client, call, code, says):
    exp = mlflow_client.create_experiment("bad")
    rid = mlflow_client.create_run(exp).info.run_id
    mlflow_client.log_param(rid, "lr", "0.1")
    if code is None:  # the client turns this one into None, as with MLflow's server
        assert call(mlflow_client, rid) is None
    else:
        with pytest.raises(MlflowException) as err:
            call(mlflow_client, rid)
        assert err.value.error_code == code and says in err.value.message
    assert Metric.objects.count() == 0
    assert mlflow_client.get_run(rid).data.params == {"lr": "0.1"}


def test_a_batch_with_one_bad_metric_stores_none_of_it(mlflow_client, live_server, reporter, api_token):
    import requests

    exp = mlflow_client.create_experiment("batch")
    rid = mlflow_client.create_run(exp).info.run_id
    body = {"run_id": rid, "metrics": [{"key": "ok", "value": 1, "timestamp": 1, "step": 1},
                                       {"key": "bad", "value": "lots", "timestamp": 1, "step": 1}],
            "params": [{"key": "p", "value": "1"}]}
    resp = requests.post(f"{live_server.url}/api/2.0/mlflow/runs/log-batch", json=body,
                         headers={"Authorization": f"Bearer {api_token(reporter)}"})
    assert resp.status_code == 400
    assert resp.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert resp.json()["message"].startswith("Invalid value \"lots\" for parameter 'metrics[1].value' supplied")
    assert Metric.objects.count() == 0 and not mlflow_client.get_run(rid).data.params


def test_a_stop_from_yardstick_shows_on_the_run_and_a_killed_end_stops_the_job(mlflow_client, operator):
    exp = mlflow_client.create_experiment("stop")
    rid = mlflow_client.create_run(exp).info.run_id
    job = Run.objects.get(run_id=rid).job
    assert "yardstick.stop_requested" not in mlflow_client.get_run(rid).data.tags
    assert job.request_stop(by=operator)
    assert mlflow_client.get_run(rid).data.tags["yardstick.stop_requested"] == "true"
    mlflow_client.set_terminated(rid, "KILLED")
    job.refresh_from_db()
    assert job.status == "stopped" and not job.can_resume


def test_a_runs_experiment_is_its_jobs_environment_and_its_team_comes_from_a_tag_or_is_unassigned(mlflow_client):
    import mlflow

    from tracking.models import Run

    mlflow.set_experiment("gsm8k-grpo")
    with mlflow.start_run() as plain:
        pass
    mlflow.set_experiment_tag("yardstick.team", "reasoning")
    with mlflow.start_run() as tagged:
        pass
    plain_job, tagged_job = (Run.objects.get(run_id=r.info.run_id).job for r in (plain, tagged))
    assert (plain_job.env, plain_job.team) == ("gsm8k-grpo", "unassigned"), "IPD groups gains per environment"
    assert (tagged_job.env, tagged_job.team) == ("gsm8k-grpo", "reasoning")


@pytest.mark.parametrize("raw, says", [
    ('{"experiment_id": "0", "run_name": "a\\u0000b"}', "run_name contains a NUL (U+0000) character"),
    ('{"experiment_id": "0", "run_name": "a\\ud800b"}', "run_name contains a lone surrogate"),
    ("[" * 100_000 + "]" * 100_000, "the body must be a JSON object nested at most 32 levels deep"),
])
def test_text_it_cannot_store_and_deep_json_get_mlflows_invalid_parameter_value(client, reporter, raw, says):
    from tracking.models import Run

    client.force_login(reporter)
    resp = client.post("/api/2.0/mlflow/runs/create", raw, content_type="application/json")
    assert resp.status_code == 400
    assert resp.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert says in resp.json()["message"]
    assert not Run.objects.exists()


def _launched_job(name, created_by):
    """A job Yardstick launched, named by the operator who started it, with the run its command reports into."""
    from tracking.store import attach_run

    job = Job.open(reason="launched", name=name, team="research", env="walk", config={}, source="launched",
                   created_by=created_by)
    attach_run(job, experiment="walk", created_by=created_by)
    return job


def test_a_launched_job_keeps_its_name_when_transformers_names_its_run(mlflow_as, operator, monkeypatch, client):
    """transformers' MLflowCallback joins the job's run (MLFLOW_RUN_ID) with start_run(run_name=its output
    directory's name), which renames the run (runs/update); TRL may set the mlflow.runName tag too."""
    mlflow_client = mlflow_as(operator)
    job = _launched_job("walk trl", operator)
    monkeypatch.setenv("MLFLOW_RUN_ID", job.run.run_id)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "walk")
    with mlflow.start_run(run_name="job-1") as run:
        mlflow.set_tag("mlflow.runName", "job-1")
        mlflow.log_metric("train/reward", 0.5, step=1)
    assert run.info.run_id == job.run.run_id
    job.refresh_from_db()
    assert job.name == "walk trl", "the name the operator typed"
    assert Run.objects.get(pk=job.run.pk).run_name == "job-1", "the run's own name is the run's"
    assert mlflow_client.get_run(run.info.run_id).data.tags["mlflow.runName"] == "job-1"
    client.force_login(operator)
    page = " ".join(client.get(f"/jobs/{job.pk}").content.decode().split())
    assert "<h1" in page and "walk trl" in page.split("<h1", 1)[1].split("</h1>", 1)[0]
    assert '<th scope="row">run name</th><td>job-1</td>' in page, "the run's own name, shown as its MLflow run name"


def test_an_outside_run_renamed_by_its_client_renames_its_job(mlflow_client):
    """Nobody but its client named an external run's job: a new run name (either way MLflow sets one) is its name."""
    exp = mlflow_client.create_experiment("renames")
    rid = mlflow_client.create_run(exp, run_name="first").info.run_id
    job = Run.objects.get(run_id=rid).job
    mlflow_client.update_run(rid, name="second")
    job.refresh_from_db()
    assert job.name == "second"
    mlflow_client.set_tag(rid, "mlflow.runName", "third")
    job.refresh_from_db()
    assert (job.name, Run.objects.get(run_id=rid).run_name) == ("third", "third")
    # A name longer than a run's name may be is refused as create_run and update_run refuse it, nothing changed.
    with pytest.raises(MlflowException, match="mlflow.runName must be a run name of at most 250 characters"):
        mlflow_client.set_tag(rid, "mlflow.runName", "x" * 251)
    assert Run.objects.get(run_id=rid).run_name == "third" and Job.objects.get(pk=job.pk).name == "third"

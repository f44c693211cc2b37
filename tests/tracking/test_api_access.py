"""Who may use the tracking API, and what it answers outside its endpoints: MLflow's JSON, never HTML."""

import mlflow
import pytest
import requests
from mlflow.exceptions import MlflowException

from tracking.models import Run


def test_a_viewer_reads_runs_but_cannot_write_them(mlflow_as, reporter, viewer):
    writer = mlflow_as(reporter)
    exp = writer.create_experiment("shared")
    rid = writer.create_run(exp).info.run_id
    reader = mlflow_as(viewer)
    assert reader.get_run(rid).info.run_id == rid
    assert [r.info.run_id for r in reader.search_runs([exp])] == [rid]
    with pytest.raises(MlflowException) as err:
        reader.log_metric(rid, "reward", 1.0)
    assert err.value.error_code == "PERMISSION_DENIED" and "reporter, operator or admin" in err.value.message
    with pytest.raises(MlflowException) as err:
        reader.create_experiment("mine")
    assert err.value.error_code == "PERMISSION_DENIED"
    assert not Run.objects.get(run_id=rid).metrics.exists()


def test_an_operator_may_report_a_run_too(mlflow_as, operator):
    client = mlflow_as(operator)
    rid = client.create_run(client.create_experiment("ops")).info.run_id
    client.log_metric(rid, "reward", 0.5, step=1)
    assert client.get_run(rid).data.metrics == {"reward": 0.5}


@pytest.mark.parametrize("path", ["/", "/jobs", "/api/jobs", "/api/whoami", "/costs"])
def test_a_reporter_token_opens_no_page_and_no_other_api(live_server, reporter, api_token, path):
    resp = requests.get(live_server.url + path, headers={"Authorization": f"Bearer {api_token(reporter)}"},
                        allow_redirects=False)
    assert resp.status_code == 403
    assert "reporter" in resp.text


def test_no_token_or_a_bad_one_is_unauthenticated_in_mlflows_shape(live_server, db):
    url = f"{live_server.url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=x"
    for headers in ({}, {"Authorization": "Bearer ys_wrong"}):
        resp = requests.get(url, headers=headers)
        assert resp.status_code == 401
        assert resp.json()["error_code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize("method, path", [
    ("POST", "/api/2.0/mlflow/logged-models"),
    ("GET", "/api/2.0/mlflow/logged-models/m-123"),
    ("POST", "/api/2.0/mlflow/runs/outputs"),
    ("GET", "/api/3.0/mlflow/traces/tr-1"),
    ("GET", "/ajax-api/2.0/mlflow/nothing/here"),
    ("GET", "/api/2.0/mlflow/runs/log-batch"),
])
def test_any_other_mlflow_path_answers_endpoint_not_found_as_json(live_server, reporter, api_token, method, path):
    resp = requests.request(method, live_server.url + path, json={},
                            headers={"Authorization": f"Bearer {api_token(reporter)}"})
    assert resp.status_code == 404
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.json()["error_code"] == "ENDPOINT_NOT_FOUND"


def test_the_ajax_api_prefix_answers_like_the_api_one(live_server, mlflow_client, reporter, api_token):
    exp = mlflow_client.create_experiment("ajax")
    resp = requests.get(f"{live_server.url}/ajax-api/2.0/mlflow/experiments/get", params={"experiment_id": exp},
                        headers={"Authorization": f"Bearer {api_token(reporter)}"})
    assert resp.json()["experiment"]["name"] == "ajax"


def test_the_default_experiment_is_there_for_a_run_with_none_set(mlflow_client):
    with mlflow.start_run() as run:
        pass
    assert run.info.experiment_id == "0"
    assert mlflow_client.get_experiment("0").name == "Default"


def test_a_launched_runs_token_writes_its_run_and_nothing_else(mlflow_as, operator, live_server, monkeypatch):
    from mlflow import MlflowClient

    from yardstick.models import ApiToken

    owner = mlflow_as(operator)
    exp = owner.create_experiment("launched")
    mine, other = owner.create_run(exp).info.run_id, owner.create_run(exp).info.run_id
    token, _row = ApiToken.issue(operator, "launched job", run_id=mine)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
    scoped = MlflowClient(tracking_uri=live_server.url)

    scoped.log_metric(mine, "reward", 0.5, step=1)
    scoped.set_tag(mine, "phase", "train")
    assert scoped.get_run(other).info.run_id == other, "it may read"
    refused = [lambda: scoped.log_metric(other, "reward", 1.0), lambda: scoped.create_run(exp),
               lambda: scoped.create_experiment("its own"), lambda: scoped.set_experiment_tag(exp, "k", "v")]
    for call in refused:
        with pytest.raises(MlflowException) as err:
            call()
        assert err.value.error_code == "PERMISSION_DENIED" and f"writes its run {mine} only" in err.value.message
    assert not Run.objects.get(run_id=other).metrics.exists()
    assert Run.objects.get(run_id=mine).metrics.get().value == 0.5
    for path in ("/api/jobs", "/jobs"):  # no page and no other API
        resp = requests.get(live_server.url + path, headers={"Authorization": f"Bearer {token}"}, allow_redirects=False)
        assert resp.status_code == 403 and "may only report its own run" in resp.text

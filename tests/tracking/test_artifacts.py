"""MLflow's proxied artifact API, driven by the real mlflow client: upload, list, download, caps and quota."""

import json
import time

import pytest
import requests

from tests.files import png_bytes


@pytest.fixture
def server(live_server, mlflow_as, reporter, settings, tmp_path):
    """The real client pointed at this server with a reporter's token (tests/tracking/conftest.py); artifacts
    under a throwaway data dir, a 1 MB file cap and a 2 MB run quota."""
    settings.DATA_DIR = tmp_path / "data"
    settings.ARTIFACT_MAX_MB, settings.RUN_ARTIFACTS_MAX_MB = 1, 2
    mlflow_as(reporter)
    return live_server


def _run(name="artifacts"):
    import mlflow

    mlflow.set_experiment(name)
    return mlflow.start_run()


def test_it_keeps_log_artifact_log_dict_and_log_figure_files_and_lists_and_downloads_them(server, tmp_path):
    import mlflow
    import plotly.graph_objects as go

    from tracking.models import Artifact, Run

    png = tmp_path / "reward.png"
    png.write_bytes(png_bytes())
    with _run() as active:
        mlflow.log_artifact(str(png), artifact_path="figures")
        mlflow.log_dict({"lr": 1e-6, "beta": 0.04}, "config/hparams.json")
        mlflow.log_figure(go.Figure(go.Scatter(x=[1, 2], y=[3, 4])), "figures/curve.html")
    run = Run.objects.get(run_id=active.info.run_id)
    assert run.artifact_uri == f"mlflow-artifacts:/{run.experiment_id}/{run.run_id}/artifacts"

    client = mlflow.MlflowClient()
    top = client.list_artifacts(run.run_id)
    assert [(f.path, f.is_dir) for f in top] == [("config", True), ("figures", True)]
    figures = client.list_artifacts(run.run_id, "figures")
    assert [(f.path, f.is_dir) for f in figures] == [("figures/curve.html", False), ("figures/reward.png", False)]
    assert figures[1].file_size == len(png_bytes())
    assert client.list_artifacts(run.run_id, "figures/reward.png") == [], "a file lists as nothing, as in MLflow"

    got = mlflow.artifacts.download_artifacts(run_id=run.run_id, artifact_path="figures/reward.png",
                                              dst_path=str(tmp_path / "down"))
    assert open(got, "rb").read() == png_bytes()
    assert mlflow.artifacts.load_dict(f"{run.artifact_uri}/config/hparams.json") == {"lr": 1e-6, "beta": 0.04}
    whole = mlflow.artifacts.download_artifacts(run_id=run.run_id, dst_path=str(tmp_path / "all"))
    assert sorted(p.relative_to(whole).as_posix() for p in __import__("pathlib").Path(whole).rglob("*") if p.is_file()) \
        == ["config/hparams.json", "figures/curve.html", "figures/reward.png"]

    stored = tmp_path / "data" / "artifacts" / str(run.experiment_id) / run.run_id / "figures" / "reward.png"
    assert stored.read_bytes() == png_bytes(), "kept under <data dir>/artifacts/<experiment>/<run>/"
    rows = {a.path: (a.size_bytes, a.content_type) for a in Artifact.objects.filter(run=run)}
    assert rows["figures/reward.png"] == (len(png_bytes()), "image/png")
    assert rows["config/hparams.json"][1] == "application/json"


def test_it_turns_verl_validation_generations_into_rollout_samples_of_that_step(server, tmp_path):
    import mlflow

    from tracking.models import Run
    from trainer.models import Sample

    # What veRL's ValidationGenerationsLogger.log_generations_to_mlflow writes at step 20.
    path = tmp_path / "val_step20.json"
    path.write_text(json.dumps([{"input": "12+30=", "output": "42", "score": 1.0},
                                {"input": "7*6=", "output": "41", "score": 0.0}]))
    with _run("verl-gsm8k") as active:
        mlflow.log_artifact(str(path))
        # veRL's newer shape: {"table_name", "rows"}; MLflow's log_table: {"columns", "data"}.
        mlflow.log_dict({"table_name": "val/generations", "rows": [{"input": "1+1=", "output": "2", "score": 1}]},
                        "val_step30.json")
        mlflow.log_table({"prompt": ["2+2="], "response": ["4"], "reward": [0.5]}, "generations/step_40.json")
    job = Run.objects.get(run_id=active.info.run_id).job
    got = [(s.step, s.index, s.prompt, s.completion, s.reward) for s in Sample.objects.filter(job=job)]
    assert got == [(20, 0, "12+30=", "42", 1.0), (20, 1, "7*6=", "41", 0.0), (30, 0, "1+1=", "2", 1.0),
                   (40, 0, "2+2=", "4", 0.5)]


def test_a_file_over_the_cap_is_refused_at_once_with_an_mlflow_error_naming_the_cap(server, tmp_path):
    import mlflow
    from mlflow.exceptions import MlflowException
    from requests.exceptions import HTTPError

    from tracking.models import Artifact, Run

    big = tmp_path / "rollouts.bin"
    big.write_bytes(b"x" * (1024 * 1024 + 1))
    with _run() as active:
        began = time.monotonic()
        with pytest.raises((HTTPError, MlflowException)) as err:
            mlflow.log_artifact(str(big))
        took = time.monotonic() - began
    assert "413" in str(err.value) and "INVALID_PARAMETER_VALUE" in str(err.value)
    assert "files up to 1 MB are accepted (YARDSTICK_ARTIFACT_MAX_MB)" in str(err.value)
    assert took < 5, f"refused once, not retried with back-off ({took:.1f} s)"
    run = Run.objects.get(run_id=active.info.run_id)
    assert not Artifact.objects.filter(run=run).exists()
    assert not list((tmp_path / "data" / "artifacts").rglob("*.bin")), "nothing of it kept"


def test_a_run_past_its_quota_is_refused_and_keeps_what_it_had(server, tmp_path):
    import mlflow
    from mlflow.exceptions import MlflowException
    from requests.exceptions import HTTPError

    from tracking.models import Artifact, Run

    part = tmp_path / "part.bin"
    part.write_bytes(b"y" * (900 * 1024))
    with _run() as active:
        mlflow.log_artifact(str(part), "a")
        mlflow.log_artifact(str(part), "b")
        mlflow.log_artifact(str(part), "b"), "writing the same file again replaces it: no more room taken"
        with pytest.raises((HTTPError, MlflowException)) as err:
            mlflow.log_artifact(str(part), "c")
    assert "RESOURCE_EXHAUSTED" in str(err.value)
    assert "a run may keep up to 2 MB (YARDSTICK_RUN_ARTIFACTS_MAX_MB)" in str(err.value)
    run = Run.objects.get(run_id=active.info.run_id)
    assert sorted(Artifact.objects.filter(run=run).values_list("path", flat=True)) == ["a/part.bin", "b/part.bin"]


def test_paths_out_of_the_run_folder_and_unknown_runs_are_refused(server, tmp_path, reporter, api_token):

    from tracking.models import Run

    with _run() as active:
        pass
    run = Run.objects.get(run_id=active.info.run_id)
    headers = {"Authorization": f"Bearer {api_token(reporter)}"}
    base = f"{server.url}/api/2.0/mlflow-artifacts/artifacts/{run.experiment_id}/{run.run_id}/artifacts"
    for bad in ("%2e%2e/%2e%2e/escaped.txt", "a/%2e%2e/%2e%2e/%2e%2e/escaped.txt", "a%5c..%5cescaped.txt"):
        resp = requests.put(f"{base}/{bad}", data=b"no", headers=headers)
        assert resp.status_code == 400 and resp.json()["error_code"] == "INVALID_PARAMETER_VALUE", (bad, resp.text)
        assert "without '..'" in resp.json()["message"]
    assert not list(tmp_path.rglob("escaped.txt"))
    other = f"{server.url}/api/2.0/mlflow-artifacts/artifacts/{run.experiment_id}/{'0' * 32}/artifacts/x.txt"
    resp = requests.put(other, data=b"no", headers=headers)
    assert resp.status_code == 404 and resp.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    resp = requests.get(f"{server.url}/api/2.0/mlflow-artifacts/artifacts", params={"path": "../etc"}, headers=headers)
    assert resp.status_code == 400 and resp.json()["error_code"] == "INVALID_PARAMETER_VALUE"


def test_a_viewer_may_read_artifacts_but_not_upload_and_other_artifact_calls_are_endpoint_not_found(
        server, tmp_path, viewer, api_token):
    import mlflow

    from tracking.models import Run

    with _run() as active:
        mlflow.log_text("hello", "notes.txt")
    run = Run.objects.get(run_id=active.info.run_id)
    headers = {"Authorization": f"Bearer {api_token(viewer)}"}
    url = f"{server.url}/api/2.0/mlflow-artifacts/artifacts/{run.experiment_id}/{run.run_id}/artifacts/notes.txt"
    got = requests.get(url, headers=headers)
    assert got.status_code == 200 and got.content == b"hello"
    assert got.headers["X-Content-Type-Options"] == "nosniff" and "sandbox" in got.headers["Content-Security-Policy"]
    put = requests.put(url, data=b"overwritten", headers=headers)
    assert put.status_code == 403 and put.json()["error_code"] == "PERMISSION_DENIED"
    assert "reporter, operator or admin" in put.json()["message"]
    assert requests.get(url, headers=headers).content == b"hello"
    mpu = requests.post(f"{server.url}/api/2.0/mlflow-artifacts/mpu/create/{run.experiment_id}/x", json={},
                        headers=headers)
    assert mpu.status_code == 404 and mpu.json()["error_code"] == "ENDPOINT_NOT_FOUND"
    assert requests.get(url).json()["error_code"] == "UNAUTHENTICATED"

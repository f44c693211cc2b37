"""What the differential tests found, driven by the real mlflow client: 64-bit steps, dataset inputs, '.'."""

import json
from pathlib import Path

import mlflow
from mlflow.entities import Dataset, DatasetInput, InputTag, Param, RunTag
from mlflow.entities import Metric as MlflowMetric

from tracking.models import DatasetInput as StoredInput
from tracking.models import Metric, Run
from trainer.models import Step


def test_a_batch_whose_steps_are_all_outside_32_bits_is_kept_and_not_charted(mlflow_client):
    rid = mlflow_client.create_run(mlflow_client.create_experiment("epochs")).info.run_id
    mlflow_client.log_batch(rid, metrics=[MlflowMetric("reward", 0.5, 1, 2**40), MlflowMetric("reward", 0.6, 2, -1)],
                            params=[Param("lr", "1e-5")], tags=[RunTag("team", "rl")])
    run = Run.objects.get(run_id=rid)
    assert sorted(Metric.objects.filter(run=run).values_list("step", flat=True)) == [-1, 2**40]
    assert not Step.objects.filter(job=run.job).exists()
    got = mlflow_client.get_run(rid)
    assert got.data.params == {"lr": "1e-5"} and got.data.tags["team"] == "rl"
    assert [(m.step, m.value) for m in mlflow_client.get_metric_history(rid, "reward")] == [(2**40, 0.5), (-1, 0.6)]


def test_a_batch_mixing_steps_charts_the_ones_in_range(mlflow_client):
    rid = mlflow_client.create_run(mlflow_client.create_experiment("mixed")).info.run_id
    mlflow_client.log_batch(rid, metrics=[MlflowMetric("reward", 0.5, 1, 3), MlflowMetric("reward", 0.7, 2, 2**31)])
    run = Run.objects.get(run_id=rid)
    assert list(Step.objects.filter(job=run.job).values_list("step", "reward_mean")) == [(3, 0.5)]
    assert Metric.objects.filter(run=run).count() == 2
    assert mlflow_client.get_run(rid).data.metrics == {"reward": 0.7}  # the highest step, as MLflow's


def test_logged_datasets_come_back_in_the_runs_inputs(mlflow_client):
    rid = mlflow_client.create_run(mlflow_client.create_experiment("inputs")).info.run_id
    gsm8k = Dataset("gsm8k", "d1", "hf", '{"path": "openai/gsm8k"}', profile='{"num_rows": 10}')
    train = DatasetInput(gsm8k, [InputTag("mlflow.data.context", "train")])
    mlflow_client.log_inputs(rid, datasets=[train])
    mlflow_client.log_inputs(rid, datasets=[train, DatasetInput(Dataset("math", "d2", "hf", "{}"))])
    assert list(StoredInput.objects.filter(run__run_id=rid).values_list("name", "digest")) == [("gsm8k", "d1"),
                                                                                              ("math", "d2")]
    inputs = mlflow_client.get_run(rid).inputs.dataset_inputs
    assert [(i.dataset.name, i.dataset.profile, [(t.key, t.value) for t in i.tags]) for i in inputs] == [
        ("gsm8k", '{"num_rows": 10}', [("mlflow.data.context", "train")]), ("math", None, [])]


def test_the_artifact_path_dot_names_the_runs_folder(mlflow_client, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    rid = mlflow_client.create_run(mlflow_client.create_experiment("dot")).info.run_id
    mlflow_client.log_dict(rid, {"a": 1}, "config/a.json")
    # The client joins the asked path and the name, as it does against MLflow's server.
    assert [(f.path, f.is_dir) for f in mlflow_client.list_artifacts(rid, ".")] == [("./config", True)]
    got = Path(mlflow.artifacts.download_artifacts(run_id=rid, artifact_path=".", dst_path=str(tmp_path / "down")))
    assert json.loads((got / "config" / "a.json").read_text()) == {"a": 1}

"""What a run's metrics become on its job: charted keys, the score in points with its baseline, IPD, staleness."""

from datetime import timedelta

import mlflow
import pytest
from django.utils import timezone

from costs.intelligence import job_intelligence
from tracking.models import Run
from tracking.tasks import mark_stale_runs
from trainer.models import Job, Step


def _job(run_id):
    return Run.objects.get(run_id=run_id).job


@pytest.mark.parametrize("logged, score, expected", [
    ({"validation/accuracy": [0.2, 0.5]}, None, [20.0, 50.0]),                  # NeMo RL, a fraction
    ({"val-core/gsm8k/acc/mean_at_1": [0.3, 0.6]}, None, [30.0, 60.0]),         # veRL ('@' rewritten as _at_)
    ({"eval_reward": [0.4, 0.7]}, None, [0.4, 0.7]),                             # TRL, as logged
    ({"eval_reward": [0.4, 0.7], "my/acc": [0.1, 0.9]}, "my/acc", [10.0, 90.0]),  # the run's tag wins
])
def test_the_score_is_the_score_key_in_points_and_its_first_value_the_baseline(mlflow_client, logged, score,
                                                                                expected):
    mlflow.set_experiment("scores")
    with mlflow.start_run(tags={"yardstick.score_key": score} if score else None) as run:
        for step in (0, 1):
            mlflow.log_metrics({k: v[step] for k, v in logged.items()}, step=step * 10)
    job = _job(run.info.run_id)
    assert list(Step.objects.filter(job=job).values_list("eval_pass1", flat=True)) == pytest.approx(expected)
    assert (job.baseline_pass1, job.latest_pass1) == pytest.approx((expected[0], expected[1]))
    card = job_intelligence(job)
    assert card["gain_points"] == pytest.approx(expected[1] - expected[0])


def test_an_experiments_score_key_rescored_its_runs(mlflow_client):
    exp = mlflow_client.create_experiment("rescore")
    rid = mlflow_client.create_run(exp).info.run_id
    for step, (acc, reward) in enumerate([(0.1, 0.5), (0.3, 0.6)]):
        mlflow_client.log_batch(rid, metrics=[mlflow.entities.Metric("eval_reward", reward, 1, step),
                                              mlflow.entities.Metric("eval_accuracy", acc, 1, step)])
    assert _job(rid).baseline_pass1 == 0.5
    mlflow_client.set_experiment_tag(exp, "yardstick.score_key", "eval_accuracy")
    job = _job(rid)
    assert (job.baseline_pass1, job.latest_pass1) == pytest.approx((10.0, 30.0))
    assert Step.objects.get(job=job, step=1).metrics["eval/pass1"] == pytest.approx(30.0)


def test_known_keys_of_trl_verl_and_nemo_rl_land_on_yardsticks_charts(mlflow_client):
    rid = mlflow_client.create_run(mlflow_client.create_experiment("keys")).info.run_id
    mlflow_client.log_batch(rid, metrics=[mlflow.entities.Metric(k, v, 1, 1) for k, v in {
        "critic/score/mean": 0.4, "actor/kl_loss": 0.02, "actor/entropy": 1.1, "perf/throughput": 900.0,
        "perf/total_num_tokens": 4096.0, "prompt_length/mean": 95.0, "response_length/mean": 33.0,
        "timing_s/gen": 1.2, "timing_s/step": 2.5}.items()])
    mlflow_client.log_batch(rid, metrics=[mlflow.entities.Metric(k, v, 1, 2) for k, v in {
        "train/reward": 0.6, "train/kl_penalty": 0.03, "train/approx_entropy": 1.0,
        "train/total_num_tokens": 9000.0, "train/mean_prompt_length": 50.0, "train/mean_gen_tokens_per_sample": 100.0,
        "timing/train/generation": 3.0, "performance/tokens_per_sec": 800.0}.items()])
    step1, step2 = Step.objects.filter(job=_job(rid)).order_by("step")
    # veRL's 4,096 batch tokens are prompts and responses: 33 of every 95 + 33 generated. Its throughput
    # (all tokens per GPU-second) is not the rollout throughput: generated tokens over the generation time.
    assert {k: step1.metrics[k] for k in ("train/reward_mean", "train/kl", "train/entropy",
                                          "performance/gen_tokens_per_s", "performance/gen_tokens",
                                          "train/response_length_mean", "timing/step_s")} == {
        "train/reward_mean": 0.4, "train/kl": 0.02, "train/entropy": 1.1, "performance/gen_tokens_per_s": 1056 / 1.2,
        "performance/gen_tokens": 1056, "train/response_length_mean": 33.0, "timing/step_s": 2.5}
    assert (step1.gen_tokens, step1.step_s, step1.metrics["critic/score/mean"]) == (1056, 2.5, 0.4)
    assert (step2.metrics["train/reward_mean"], step2.metrics["train/kl"], step2.reward_mean) == (0.6, 0.03, 0.6)
    # NeMo RL's likewise: 9,000 tokens, 100 of every 150 generated, in 3 s of generation.
    assert (step2.gen_tokens, step2.metrics["performance/gen_tokens_per_s"]) == (6000, 2000.0)
    assert _job(rid).latest_reward_mean == 0.6


def test_a_silent_run_goes_stale_and_a_later_log_revives_it(mlflow_client, settings):
    rid = mlflow_client.create_run(mlflow_client.create_experiment("stale")).info.run_id
    job = _job(rid)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=settings.YARDSTICK_RUN_STALE_S + 5))
    assert mark_stale_runs() == 1
    job.refresh_from_db()
    assert job.status == "failed" and job.error.startswith("stale: no metric for 6")
    mlflow_client.log_metric(rid, "reward", 0.3, step=1)
    job.refresh_from_db()
    assert (job.status, job.error) == ("running", "")
    assert mark_stale_runs() == 0

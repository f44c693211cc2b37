"""NeMo RL's MLflowLogger reporting a GRPO run: its calls, replayed with the real mlflow client against a live Yardstick.

NeMo RL's PyPI package is a placeholder, so its logger cannot be installed and run here. What it sends
was read from its source, not run: NVIDIA-NeMo/RL at commit 7ea279abfbeb (nemo_rl/utils/logger.py:
MLflowLogger and flatten_dict; nemo_rl/algorithms/grpo.py: grpo_train and validate;
nemo_rl/algorithms/utils.py: print_performance_metrics; nemo_rl/algorithms/loss/loss_functions.py:
ClippedPGLossFn's metrics; examples/configs/grpo_math_1B.yaml). Each call below is one of its calls:

- MLflowLogger.__init__ without a run id: get_experiment_by_name, and when there is none,
  create_experiment with its own log folder (`<logger.log_dir>/mlflow`) as the artifact location;
  then set_experiment and start_run(run_name=logger.mlflow.run_name).
- log_hyperparams(master_config.model_dump()): log_params of the config flattened with '.', a list
  expanded into one key per index, None as "None".
- log_metrics(metrics, step, prefix): log_metrics of `<prefix>/<key>` at the step grpo_train passes,
  total_steps + 1 (the first step is 1; an initial validation, val_at_start, is at 0). A training
  step logs `train/`, `performance/` and `timing/train/` in three calls; `validation/` and
  `timing/validation/` every val_period steps.
"""

import mlflow
import pytest

from tracking.models import Run
from trainer.models import Step

EXPERIMENT, RUN_NAME, LOG_DIR = "grpo-math", "qwen-1.5b-run1", "logs/exp_001"
# master_config.model_dump() of grpo_math_1B.yaml with a user's overrides, as flatten_dict gives it (a part).
PARAMS = {
    "policy.model_name": "Qwen/Qwen2.5-1.5B", "policy.train_global_batch_size": 512,
    "policy.train_micro_batch_size": 4, "policy.max_total_sequence_length": 512, "policy.precision": "bfloat16",
    "policy.optimizer.name": "torch.optim.AdamW", "policy.optimizer.kwargs.lr": 5e-06,
    "policy.generation.backend": "vllm", "policy.generation.temperature": 1.0, "policy.generation.stop_token_ids": None,
    "policy.generation.vllm_cfg.tensor_parallel_size": 1, "policy.generation.vllm_cfg.gpu_memory_utilization": 0.6,
    "loss_fn.reference_policy_kl_penalty": 0.01, "loss_fn.reference_policy_kl_type": "k3",
    "loss_fn.ratio_clip_min": 0.2, "loss_fn.ratio_clip_max": 0.2, "loss_fn.ratio_clip_c": None,
    "data.max_input_seq_length": 512, "data.shuffle": True,
    "grpo.num_prompts_per_step": 32, "grpo.num_generations_per_prompt": 16, "grpo.max_num_epochs": 1,
    "grpo.max_num_steps": 500, "grpo.normalize_rewards": True, "grpo.use_leave_one_out_baseline": True,
    "grpo.val_period": 2, "grpo.val_at_start": True, "grpo.seed": 42, "grpo.adv_estimator.name": "grpo",
    "logger.log_dir": LOG_DIR, "logger.mlflow_enabled": True, "logger.monitor_gpus": False,
    "logger.mlflow.experiment_name": EXPERIMENT, "logger.mlflow.run_name": RUN_NAME,
    "logger.mlflow.tracking_uri": "http://localhost:5000",
    "cluster.gpus_per_node": 8, "cluster.num_nodes": 1,
    "checkpointing.enabled": True, "checkpointing.checkpoint_dir": "results/grpo", "checkpointing.save_period": 10,
    "checkpointing.metric_name": "val:accuracy",
}


def _start_like_nemo_rl(experiment=EXPERIMENT):
    """MLflowLogger.__init__ (module docstring): the run id it then logs with."""
    if mlflow.get_experiment_by_name(experiment) is None:
        mlflow.create_experiment(name=experiment, artifact_location=f"{LOG_DIR}/mlflow")
    mlflow.set_experiment(experiment)
    return mlflow.start_run(run_name=RUN_NAME).info.run_id


def _validation(run_id, step, accuracy):
    mlflow.log_metrics({"validation/accuracy": accuracy, "validation/avg_length": 310.0}, step=step, run_id=run_id)
    mlflow.log_metrics({"timing/validation/total_validation_time": 12.0}, step=step, run_id=run_id)


def _training_step(run_id, step):
    """grpo_train's three log_metrics calls of one step (validation aside)."""
    mlflow.log_metrics({f"train/{k}": v for k, v in {
        "loss": 0.02 * step, "grad_norm": 0.4, "reward": 0.25 * step, "mean_prompt_length": 120.0,
        "total_num_tokens": 220_000.0, "advantages/mean": 0.0, "lr": 5e-06, "kl_penalty": 0.001 * step,
        "approx_entropy": 0.8, "token_mult_prob_error": 1.01, "gen_kl_error": 0.0005, "global_valid_toks": 150_000.0,
        "mean_gen_tokens_per_sample": 290.0 + step}.items()}, step=step, run_id=run_id)
    mlflow.log_metrics({f"performance/{k}": v for k, v in {
        "samples_per_sec": 9.0, "tokens_per_sec": 2600.0, "samples_per_sec_per_gpu": 1.1,
        "tokens_per_sec_per_gpu": 325.0, "generation_tokens_per_sec": 5200.0}.items()}, step=step, run_id=run_id)
    mlflow.log_metrics({f"timing/train/{k}": v for k, v in {
        "total_step_time": 80.0 + step, "generation": 35.0, "reward_calculation": 2.0,
        "policy_and_reference_logprobs": 8.0, "policy_training": 30.0,
        "valid_tokens_per_sec_per_gpu": 230.0}.items()}, step=step, run_id=run_id)


@pytest.fixture
def nemo_rl_run(mlflow_client):
    """Two GRPO steps of NeMo RL, validation at the start and at step 2 (val_period 2); the run left open."""
    run_id = _start_like_nemo_rl()
    mlflow.log_params(PARAMS, run_id=run_id)
    _validation(run_id, 0, 0.30)
    _training_step(run_id, 1)
    _training_step(run_id, 2)
    _validation(run_id, 2, 0.45)
    return Run.objects.select_related("job").get(run_id=run_id)


def test_a_nemo_rl_run_is_a_nemo_rl_job_with_its_steps_charted_and_its_validation_accuracy_scored(nemo_rl_run,
                                                                                                  client, viewer):
    job = nemo_rl_run.job
    assert (nemo_rl_run.run_name, job.source, job.framework) == (RUN_NAME, "external", "nemo-rl")
    assert (job.steps_total, job.steps_done) == (500, 2), "grpo.max_num_steps"
    client.force_login(viewer)
    api = client.get(f"/api/jobs/{job.pk}").json()
    assert (api["framework"], api["steps"], api["steps_done"]) == ("nemo-rl", 500, 2)
    assert "external · nemo-rl</span>" in client.get(f"/jobs/{job.pk}").content.decode()
    steps = client.get(f"/api/jobs/{job.pk}/steps").json()["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    first = steps[1]["metrics"]
    assert {k: first[k] for k in (
        "train/reward_mean", "train/kl", "train/entropy", "train/loss", "train/grad_norm", "train/lr",
        "train/response_length_mean", "performance/gen_tokens_per_s", "timing/step_s", "timing/generate_s",
        "timing/train_s")} == {
        "train/reward_mean": 0.25, "train/kl": 0.001, "train/entropy": 0.8, "train/loss": 0.02, "train/grad_norm": 0.4,
        "train/lr": 5e-06, "train/response_length_mean": 291.0,
        # Its throughputs count prompt tokens too: the generated share of its 220,000 batch tokens
        # (291 of every 120 + 291), over the 35 s of generation, once the timings arrive after the tokens.
        "performance/gen_tokens_per_s": 155_766 / 35.0,
        "timing/step_s": 81.0, "timing/generate_s": 35.0, "timing/train_s": 30.0}
    rows = Step.objects.filter(job=job).order_by("step")
    assert [(r.reward_mean, r.step_s, r.eval_pass1) for r in rows] == [(None, None, 30.0), (0.25, 81.0, None),
                                                                       (0.5, 82.0, 45.0)]
    assert [r.gen_tokens for r in rows] == [None, 155_766, 155_922]  # 220,000 x 292 / 412 at step 2
    job.refresh_from_db()
    assert (job.baseline_pass1, job.latest_pass1, job.latest_reward_mean) == (30.0, 45.0, 0.5)


def test_its_figures_reach_yardstick_only_from_an_experiment_that_existed_before_the_run(mlflow_client):
    # An experiment NeMo RL creates itself keeps its log folder as the artifact location: log_figure then
    # writes to the training machine's disk, not to Yardstick.
    run_id = _start_like_nemo_rl()
    mlflow.end_run()
    assert Run.objects.get(run_id=run_id).artifact_uri == f"{LOG_DIR}/mlflow/{run_id}/artifacts"

    experiment_id = mlflow_client.create_experiment("grpo-math-made-first")
    run_id = _start_like_nemo_rl("grpo-math-made-first")
    assert Run.objects.get(run_id=run_id).artifact_uri == f"mlflow-artifacts:/{experiment_id}/{run_id}/artifacts"

"""veRL's own logger reporting a GRPO run to a live Yardstick: the job says veRL, plans its steps, charts its metrics.

The logger is the real `Tracking` of the veRL 0.9.1 wheel (verl/utils/tracking.py), which the Makefile
unpacks without its dependencies into .venv/verl, off the path. `import verl.utils.tracking` would run
verl/__init__.py, which imports Ray; so that one file is loaded by itself with
importlib.util.spec_from_file_location, unchanged and without stubs: with the mlflow backend it needs
only mlflow, pandas, orjson and packaging. It is driven as veRL's RayPPOTrainer.fit drives it: the
config as `OmegaConf.to_container(config, resolve=True)` hands it over (a plain dict, so no OmegaConf
here), the validation before training at step 0, then each step's metrics at steps 1, 2, 3 (the
validation of a test_freq step in the same dict), the real mlflow client talking to the live server
with a reporter's token (MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from tracking.models import Run
from trainer.models import Status, Step

VERL_TRACKING = Path(sys.prefix) / "verl" / "verl" / "utils" / "tracking.py"

# A GSM8K GRPO run of veRL's examples (examples/grpo_trainer), resolved as the trainer resolves it. The
# trainer leaves trainer.total_training_steps None when the user does not set it and writes the total it
# computed (the train dataloader's length x total_epochs: 29 x 15) into the actor's and critic's optim.
CONFIG = {
    "data": {
        "tokenizer": None, "train_files": ["~/data/gsm8k/train.parquet"], "val_files": ["~/data/gsm8k/test.parquet"],
        "prompt_key": "prompt", "reward_fn_key": "data_source", "max_prompt_length": 512,
        "max_response_length": 1024, "train_batch_size": 256, "val_batch_size": None, "shuffle": True,
        "filter_overlong_prompts": True, "truncation": "error",
    },
    "actor_rollout_ref": {
        "hybrid_engine": True,
        "model": {"path": "Qwen/Qwen2.5-0.5B-Instruct", "use_remove_padding": True,
                  "enable_gradient_checkpointing": True, "lora_rank": 0},
        "actor": {
            "strategy": "fsdp", "ppo_mini_batch_size": 64, "ppo_micro_batch_size_per_gpu": 16,
            "use_dynamic_bsz": False, "clip_ratio": 0.2, "loss_agg_mode": "token-mean", "entropy_coeff": 0,
            "use_kl_loss": True, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "ppo_epochs": 1,
            "optim": {"lr": 1e-06, "lr_warmup_steps_ratio": 0.0, "total_training_steps": 435, "weight_decay": 0.01},
            "fsdp_config": {"param_offload": False, "optimizer_offload": False, "fsdp_size": -1},
            "checkpoint": {"save_contents": ["model", "optimizer", "extra"],
                           "load_contents": ["model", "optimizer", "extra"]},
        },
        "ref": {"log_prob_micro_batch_size_per_gpu": 16, "fsdp_config": {"param_offload": True}},
        "rollout": {
            "name": "vllm", "mode": "async", "n": 5, "temperature": 1.0, "top_p": 1.0, "prompt_length": 512,
            "response_length": 1024, "gpu_memory_utilization": 0.6, "tensor_model_parallel_size": 1,
            "log_prob_micro_batch_size_per_gpu": 16,
            "val_kwargs": {"n": 1, "do_sample": False, "temperature": 0, "top_p": 1.0},
        },
    },
    "critic": {"enable": False, "strategy": "fsdp", "optim": {"lr": 1e-05, "total_training_steps": 435}},
    "reward_model": {"enable": False, "reward_manager": "naive"},
    "custom_reward_function": {"path": None, "name": "compute_score"},
    "algorithm": {"gamma": 1.0, "lam": 1.0, "adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True,
                  "use_kl_in_reward": False, "kl_penalty": "kl", "kl_ctrl": {"type": "fixed", "kl_coef": 0.001}},
    "trainer": {
        "balance_batch": True, "total_epochs": 15, "total_training_steps": None, "project_name": "verl-gsm8k",
        "experiment_name": "qwen2.5-0.5b-grpo", "logger": ["console", "mlflow"], "nnodes": 1,
        "n_gpus_per_node": 2, "save_freq": 20, "test_freq": 3, "val_before_train": True,
        "default_local_dir": "checkpoints/verl-gsm8k/qwen2.5-0.5b-grpo", "device": "cuda",
    },
}
# veRL's validation of GSM8K: its reward function returns a bare score, so the core key is reward, not acc.
VAL = "val-core/openai/gsm8k/reward/mean@1"


def _step_metrics(step):
    """What RayPPOTrainer.fit logs at one step (trainer/ppo/metric_utils.py, ray_trainer.py), a few of each family."""
    return {
        "training/global_step": step, "training/epoch": 0,
        "actor/pg_loss": -0.01 * step, "actor/kl_loss": 0.001 * step, "actor/entropy": 0.9, "actor/grad_norm": 0.5,
        "actor/lr": 1e-06, "actor/pg_clipfrac": 0.002, "actor/ppo_kl": 0.0001, "perf/mfu/actor": 0.31,
        "perf/max_memory_allocated_gb": 40.5,
        "critic/score/mean": 0.2 * step, "critic/score/max": 1.0, "critic/score/min": 0.0,
        "critic/advantages/mean": 0.0, "critic/returns/mean": 0.1,
        "response_length/mean": 200.0 + step, "response_length/max": 1024.0, "response_length/clip_ratio": 0.05,
        "prompt_length/mean": 110.0,
        "timing_s/gen": 30.0, "timing_s/reward": 1.5, "timing_s/old_log_prob": 4.0, "timing_s/ref": 4.0,
        "timing_s/adv": 0.1, "timing_s/update_actor": 20.0, "timing_s/step": 60.0 + step,
        "timing_per_token_ms/gen": 0.1,
        "perf/total_num_tokens": 400_000, "perf/time_per_step": 60.0 + step, "perf/throughput": 3200.0,
    }


def _verl_tracking():
    """veRL's verl/utils/tracking.py, loaded from the installed wheel by itself (module docstring)."""
    assert VERL_TRACKING.is_file(), f"veRL's logger is not at {VERL_TRACKING}: `make dev` unpacks verl==0.9.1 there"
    spec = importlib.util.spec_from_file_location("verl_utils_tracking", VERL_TRACKING)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.fixture
def verl_run(mlflow_client, monkeypatch):
    """A three-step veRL GRPO run through its own logger, still running (veRL ends it in Tracking.finish)."""
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    verl = _verl_tracking()
    trainer = CONFIG["trainer"]
    tracking = verl.Tracking(project_name=trainer["project_name"], experiment_name=trainer["experiment_name"],
                             default_backend=["mlflow"], config=CONFIG)
    # veRL carries on without MLflow when it could not start the run (and retries its logs quietly):
    # only the rows show whether anything arrived.
    assert "mlflow" in tracking.logger, "veRL's MLflow backend did not start against Yardstick"
    tracking.log(data={VAL: 0.31, "val-aux/openai/gsm8k/reward/std@1": 0.46}, step=0)
    for step in (1, 2, 3):
        tracking.log(data={**_step_metrics(step), **({VAL: 0.47} if step == 3 else {})}, step=step)
    yield verl, tracking
    tracking.finish()


def test_verls_own_logger_makes_a_verl_job_with_the_steps_its_trainer_plans(verl_run, client, viewer):
    verl, tracking = verl_run
    run = Run.objects.select_related("experiment", "job").get(experiment__name="verl-gsm8k")
    assert run.run_name == "qwen2.5-0.5b-grpo"
    sent = verl._compute_mlflow_params_from_objects(CONFIG)
    assert "actor_rollout_ref/rollout/n" in sent and "trainer/total_training_steps" in sent, "flattened with '/'"
    assert dict(run.params.values_list("key", "value")) == {k: str(v) for k, v in sent.items()}
    job = run.job
    assert (job.source, job.framework, job.status) == ("external", "verl", Status.RUNNING)
    assert (job.steps_total, job.steps_done) == (435, 3), "from actor_rollout_ref/actor/optim/total_training_steps"

    client.force_login(viewer)
    api = client.get(f"/api/jobs/{job.pk}").json()
    assert (api["framework"], api["steps"], api["steps_done"]) == ("verl", 435, 3)
    jobs = client.get("/jobs").content.decode()
    row = jobs[jobs.index(f'<tr data-job="{job.pk}">'):]
    row = row[:row.index("</tr>")]
    assert "external · verl</span>" in row and '<span class="progress-text">3 / 435</span>' in row
    page = client.get(f"/jobs/{job.pk}").content.decode()
    assert "external · verl</span>" in page
    assert '<th scope="row">actor_rollout_ref/rollout/n</th><td><code>5</code></td>' in page

    tracking.finish()
    run.refresh_from_db()
    assert run.status == "FINISHED"


def test_verls_step_metrics_land_on_yardsticks_charts_and_its_validation_is_the_score(verl_run, client, viewer):
    job = Run.objects.get(experiment__name="verl-gsm8k").job
    client.force_login(viewer)
    steps = client.get(f"/api/jobs/{job.pk}/steps").json()["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    first = steps[1]["metrics"]
    assert {k: first[k] for k in (
        "train/reward_mean", "train/kl", "train/entropy", "train/loss", "train/grad_norm", "train/lr",
        "train/clip_ratio", "train/response_length_mean", "train/truncated_rate", "performance/gen_tokens_per_s",
        "performance/gen_tokens", "performance/mfu", "timing/generate_s", "timing/train_s", "timing/step_s")} == {
        "train/reward_mean": 0.2, "train/kl": 0.001, "train/entropy": 0.9, "train/loss": -0.01,
        "train/grad_norm": 0.5, "train/lr": 1e-06, "train/clip_ratio": 0.002, "train/response_length_mean": 201.0,
        "train/truncated_rate": 0.05, "performance/gen_tokens_per_s": 258_521 / 30.0, "performance/gen_tokens": 258_521,
        "performance/mfu": 0.31, "timing/generate_s": 30.0, "timing/train_s": 20.0, "timing/step_s": 61.0}
    # perf/total_num_tokens counts prompts and responses (201 of every 110 + 201 tokens generated), and
    # perf/throughput is all tokens per GPU-second: the rollout figures are the generated share.
    assert first["critic/score/mean"] == 0.2 and first["timing_s/gen"] == 30.0, "raw keys kept beside"
    # veRL's MLflow adapter rewrites '@' (MLflow refuses it): the score arrives as mean_at_1, taken as logged.
    score = "val-core/openai/gsm8k/reward/mean_at_1"
    assert steps[0]["metrics"][score] == 0.31 and VAL not in steps[0]["metrics"]
    assert [(s["step"], s["metrics"].get("eval/pass1")) for s in steps] == [(0, 0.31), (1, None), (2, None),
                                                                           (3, 0.47)]
    rows = Step.objects.filter(job=job).order_by("step")
    assert [(r.reward_mean, r.step_s, r.gen_tokens, r.eval_pass1) for r in rows] == [
        (None, None, None, 0.31), (0.2, 61.0, 258_521, None), (0.4, 62.0, 258_974, None),
        (pytest.approx(0.6), 63.0, 259_425, 0.47)]
    job.refresh_from_db()
    assert (job.baseline_pass1, job.latest_pass1, job.latest_reward_mean) == (0.31, 0.47, pytest.approx(0.6))

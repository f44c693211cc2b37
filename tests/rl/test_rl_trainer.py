"""The Trainer: a step changes the policy, resumes are exact, evaluation leaves training alone."""

import math

import pytest
import torch

from trainer.rl import ConfigError, StepResult, Trainer

METRIC_KEYS = {
    "train/reward_mean", "train/reward_std", "train/reward_min", "train/reward_max", "train/frac_reward_zero_std",
    "train/loss", "train/kl", "train/entropy", "train/clip_ratio", "train/grad_norm", "train/lr",
    "train/response_length_mean", "train/truncated_rate", "train/tool_calls_mean", "performance/gen_tokens",
    "performance/gen_tokens_per_s", "performance/train_tokens_per_s", "performance/tokens_total",
    "performance/model_flops", "performance/train_tokens",
    "timing/generate_s", "timing/score_s", "timing/train_s", "timing/step_s",
}


def comparable(metrics: dict) -> dict:
    """Metrics that do not depend on how fast the machine was."""
    return {k: v for k, v in metrics.items() if not k.startswith("timing/") and not k.endswith("_per_s")}


def test_a_short_run_changes_every_parameter(make_config, tiny_base_dir):
    """Rewards are drawn by the test, seeded, half 0 and half 1 within each group: a parameter moves only where
    a group's rewards differ, and what the tiny policy itself earns (mostly all 0) depends on the weights its
    pretraining reached on this CPU's arithmetic."""
    trainer = Trainer(make_config(), tiny_base_dir)
    before = {name: p.detach().clone() for name, p in trainer.policy.named_parameters()}
    draw = torch.Generator().manual_seed(7)
    for _ in range(3):
        batch = trainer.collect()
        group = trainer.config.group_size
        halves = torch.tensor([1.0, 0.0]).repeat_interleave(group // 2).repeat(len(batch.reward) // group)
        order = torch.cat([torch.randperm(group, generator=draw) + i for i in range(0, len(batch.reward), group)])
        batch.reward = halves[order]
        trainer.update(batch)
    unchanged = [name for name, p in trainer.policy.named_parameters() if torch.equal(p, before[name])]
    assert unchanged == []
    assert trainer.step == 3
    for _name, p in trainer.reference.named_parameters():  # the reference stays the base
        assert not p.requires_grad


def test_a_step_reports_every_metric_and_a_few_samples(make_config, tiny_base_dir):
    trainer = Trainer(make_config(samples_per_step=3), tiny_base_dir)
    result = trainer.train_step()
    assert isinstance(result, StepResult) and result.step == 1
    assert set(result.metrics) == METRIC_KEYS
    assert all(isinstance(v, float) and math.isfinite(v) for v in result.metrics.values())
    m = result.metrics
    assert 0.0 <= m["train/reward_min"] <= m["train/reward_mean"] <= m["train/reward_max"] <= 1.0
    assert m["performance/tokens_total"] == m["performance/gen_tokens"] > 0
    assert m["train/lr"] == pytest.approx(1e-3)  # warmup of one step: full lr from the start
    assert len(result.samples) == 3
    assert set(result.samples[0]) == {"prompt", "completion", "reward", "advantage", "tool_calls"}
    assert len({s["prompt"] for s in result.samples}) == 3  # one from each of three groups


def test_resuming_from_a_checkpoint_repeats_an_uninterrupted_run(make_config, tiny_base_dir, tmp_path):
    config = make_config(minibatch_size=8, inner_epochs=2, lr_schedule="cosine")  # shuffled minibatches too
    straight = Trainer(config, tiny_base_dir)
    expected = [comparable(straight.train_step().metrics) for _ in range(4)]

    first = Trainer(config, tiny_base_dir)
    got = [comparable(first.train_step().metrics) for _ in range(2)]
    first.save_checkpoint(tmp_path / "ckpt" / "step-2.pt")
    del first
    torch.manual_seed(12345)  # whatever the process did in between must not matter
    resumed = Trainer.from_checkpoint(tmp_path / "ckpt" / "step-2.pt", tiny_base_dir)
    assert resumed.step == 2
    got += [comparable(resumed.train_step().metrics) for _ in range(2)]

    assert got == expected
    for a, b in zip(straight.policy.parameters(), resumed.policy.parameters()):
        assert torch.equal(a, b)


def test_evaluation_does_not_disturb_the_training_random_stream(make_config, tiny_base_dir):
    plain = Trainer(make_config(), tiny_base_dir)
    evaluated = Trainer(make_config(), tiny_base_dir)
    plain.train_step()
    evaluated.train_step()
    first = evaluated.evaluate()
    assert set(first) == {"eval/pass1", "timing/eval_s"} and 0.0 <= first["eval/pass1"] <= 100.0
    assert evaluated.evaluate()["eval/pass1"] == first["eval/pass1"]  # greedy: the same twice
    assert comparable(evaluated.train_step().metrics) == comparable(plain.train_step().metrics)


def test_the_same_seed_gives_the_same_run_and_another_seed_does_not(make_config, tiny_base_dir):
    a = Trainer(make_config(seed=3), tiny_base_dir).train_step()
    b = Trainer(make_config(seed=3), tiny_base_dir).train_step()
    c = Trainer(make_config(seed=4), tiny_base_dir).train_step()
    assert comparable(a.metrics) == comparable(b.metrics)
    assert [s["prompt"] for s in a.samples] != [s["prompt"] for s in c.samples]


def test_toolcalc_steps_report_tool_use(make_config, tiny_base_dir):
    trainer = Trainer(make_config(env="toolcalc", max_new_tokens=20), tiny_base_dir)
    result = trainer.train_step()
    calls = [s["tool_calls"] for s in result.samples]
    assert all(isinstance(c, int) and c >= 0 for c in calls)
    assert result.metrics["train/tool_calls_mean"] >= 0.0


def test_it_refuses_more_new_tokens_than_the_policy_can_see(make_config, tiny_base_dir):
    with pytest.raises(ConfigError, match=r"max_new_tokens must be <= 56 for arithmetic .* got 60"):
        Trainer(make_config(max_new_tokens=60), tiny_base_dir)


def test_torch_threads_is_applied(make_config, tiny_base_dir):
    before = torch.get_num_threads()
    try:
        Trainer(make_config(torch_threads=1), tiny_base_dir)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_with_kl_coef_0_the_reference_is_never_run_and_no_kl_is_reported(make_config, tiny_base_dir):
    trainer = Trainer(make_config(kl_coef=0.0), tiny_base_dir)
    calls = []
    trainer.reference.register_forward_hook(lambda *a: calls.append(1))
    m = trainer.train_step().metrics
    assert calls == [] and set(m) == METRIC_KEYS - {"train/kl"}
    with_kl = Trainer(make_config(kl_coef=0.02), tiny_base_dir)
    with_kl.reference.register_forward_hook(lambda *a: calls.append(1))
    assert "train/kl" in with_kl.train_step().metrics and calls == [1], "one forward pass of the reference a step"


def test_several_updates_a_step_take_the_samplers_log_probs_as_the_old_ones_without_a_forward_pass(
        make_config, tiny_base_dir):
    """Four minibatches: the policy's log-probs before the first update come from the sampler, so the policy runs
    forward once for each minibatch's update and never over the whole batch."""
    trainer = Trainer(make_config(minibatch_size=4, kl_coef=0.0), tiny_base_dir)  # 16 rows: 4 updates
    batch = trainer.collect()
    rows = []
    trainer.policy.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    trainer.update(batch)
    assert rows == [4, 4, 4, 4]


def test_a_step_reports_its_model_flops_6_per_parameter_per_position_trained_and_2_per_token_generated(
        make_config, tiny_base_dir):
    trainer = Trainer(make_config(inner_epochs=2), tiny_base_dir)
    batch = trainer.collect()
    m = trainer.update(batch).metrics
    rows, width = batch.rollout.tokens.shape
    per_token = trainer.policy.flops_per_token(width - 1)  # forward and backward at this sequence length
    trained = 2 * rows * (width - 1)  # two epochs over every position
    assert m["performance/model_flops"] == pytest.approx(per_token * (trained + m["performance/gen_tokens"] / 3))

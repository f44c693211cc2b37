"""TrainConfig: defaults, round trips and messages that name the field, the value and what is accepted."""

import os

import pytest

from trainer.rl import ConfigError, TrainConfig


def test_defaults_round_trip_through_a_dict():
    config = TrainConfig()
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert config.samples_per_step == 4 and config.torch_threads == 0


def test_missing_fields_take_defaults_and_ints_are_accepted_for_floats():
    config = TrainConfig.from_dict({"env": "toolcalc", "kl_coef": 0, "lr": 1})
    assert config.env == "toolcalc" and config.kl_coef == 0.0 and isinstance(config.lr, float)
    assert config.group_size == TrainConfig().group_size


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("group_size", 1, "group_size must be an integer from 2 to 256, got 1"),
        ("env", "foo", "env must be one of arithmetic, toolcalc, got 'foo'"),
        ("steps", 0, "steps must be an integer from 1 to 100000, got 0"),
        ("steps", "10", "steps must be an integer from 1 to 100000, got '10'"),
        ("steps", True, "steps must be an integer from 1 to 100000, got True"),
        ("steps", 2.5, "steps must be an integer from 1 to 100000, got 2.5"),
        ("prompts_per_step", 0, "prompts_per_step must be an integer from 1 to 4096, got 0"),
        ("lr", 0, "lr must be a number > 0 and <= 1, got 0"),
        ("lr", float("nan"), "lr must be a number > 0 and <= 1, got nan"),
        ("clip_eps", 1.0, "clip_eps must be a number > 0 and < 1, got 1.0"),
        ("kl_coef", -0.1, "kl_coef must be a number >= 0 and <= 10, got -0.1"),
        ("eval_every", 0, "eval_every must be an integer from 1 to 100000, got 0"),
        ("temperature", 0, "temperature must be a number > 0 and <= 10, got 0"),
        ("lr_schedule", "linear", "lr_schedule must be one of constant, cosine, got 'linear'"),
        ("max_grad_norm", 0, "max_grad_norm must be a number > 0 and <= 1000, got 0"),
        ("torch_threads", -1, f"torch_threads must be an integer from 0 to {os.cpu_count()}, got -1"),
    ],
)
def test_it_rejects_bad_values_with_a_message_naming_field_value_and_accepted(field, value, message):
    with pytest.raises(ConfigError) as raised:
        TrainConfig.from_dict({field: value})
    assert raised.value.field == field
    assert str(raised.value) == message
    assert isinstance(raised.value, ValueError)


def test_it_rejects_unknown_fields_and_lists_the_accepted_ones():
    with pytest.raises(ConfigError) as raised:
        TrainConfig.from_dict({"group_sise": 8})
    assert raised.value.field == "group_sise"
    assert str(raised.value).startswith("unknown field 'group_sise'; accepted fields are env, steps, seed,")


def test_direct_construction_is_checked_too():
    with pytest.raises(ConfigError, match="group_size must be an integer from 2 to 256, got 0"):
        TrainConfig(group_size=0)


NUMBER_UPPER_BOUNDS = {
    "steps": 100_000, "seed": 2**63 - 1, "prompts_per_step": 4096, "group_size": 256, "temperature": 10,
    "top_k": 1024, "max_new_tokens": 512, "lr": 1, "weight_decay": 1, "kl_coef": 10, "inner_epochs": 16,
    "minibatch_size": 65_536, "max_grad_norm": 1000, "warmup_steps": 100_000, "eval_every": 100_000,
    "eval_size": 10_000, "checkpoint_every": 100_000, "keep_checkpoints": 100, "samples_per_step": 256,
    "torch_threads": os.cpu_count(),
}


def test_every_numeric_field_has_an_upper_bound():
    numeric = {name for name, value in TrainConfig().to_dict().items() if isinstance(value, (int, float))}
    assert numeric - {"clip_eps"} == set(NUMBER_UPPER_BOUNDS)  # clip_eps is bounded below 1 (see above)


@pytest.mark.parametrize("field, bound", sorted(NUMBER_UPPER_BOUNDS.items()))
def test_it_accepts_each_upper_bound_and_refuses_beyond_it_naming_the_bound(field, bound):
    assert getattr(TrainConfig.from_dict({field: bound}), field) == bound
    too_big = bound + 1 if isinstance(bound, int) else bound * 1.5
    for value in (too_big, 10**20, 10**4300):
        with pytest.raises(ConfigError) as raised:
            TrainConfig.from_dict({field: value})
        assert raised.value.field == field
        assert f"<= {bound:g}" in raised.value.message or f"to {bound}" in raised.value.message


def test_torch_threads_is_bounded_by_the_cores_of_the_machine_that_checks_it():
    # 1,000,000 threads killed the jobs worker's pool process (SIGSEGV) and left its job running.
    with pytest.raises(ConfigError, match=f"torch_threads must be an integer from 0 to {os.cpu_count()}, "
                                          "got 1000000"):
        TrainConfig.from_dict({"torch_threads": 1_000_000})

"""TrainConfig: defaults, round trips and messages that name the field, the value and what is accepted."""

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
        ("group_size", 1, "group_size must be an integer >= 2, got 1"),
        ("env", "foo", "env must be one of arithmetic, toolcalc, got 'foo'"),
        ("steps", 0, "steps must be an integer >= 1, got 0"),
        ("steps", "10", "steps must be an integer >= 1, got '10'"),
        ("steps", True, "steps must be an integer >= 1, got True"),
        ("steps", 2.5, "steps must be an integer >= 1, got 2.5"),
        ("prompts_per_step", 0, "prompts_per_step must be an integer >= 1, got 0"),
        ("lr", 0, "lr must be a number > 0 and <= 1, got 0"),
        ("lr", float("nan"), "lr must be a number > 0 and <= 1, got nan"),
        ("clip_eps", 1.0, "clip_eps must be a number > 0 and < 1, got 1.0"),
        ("kl_coef", -0.1, "kl_coef must be a number >= 0, got -0.1"),
        ("eval_every", 0, "eval_every must be an integer >= 1, got 0"),
        ("temperature", 0, "temperature must be a number > 0 and <= 10, got 0"),
        ("lr_schedule", "linear", "lr_schedule must be one of constant, cosine, got 'linear'"),
        ("max_grad_norm", 0, "max_grad_norm must be a number > 0, got 0"),
        ("torch_threads", -1, "torch_threads must be an integer >= 0, got -1"),
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
    with pytest.raises(ConfigError, match="group_size must be an integer >= 2, got 0"):
        TrainConfig(group_size=0)

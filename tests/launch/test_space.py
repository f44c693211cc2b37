"""A sweep's search space over a recipe's typed parameters (launch/space.py, a pure core): what it accepts, and each
refusal naming its field, so no value a search draws is one a launch would refuse."""

import pytest

from launch.params import ParamError
from launch.space import Dimension, parse_space

PARAMS = [
    {"name": "lr", "kind": "float", "default": 1e-5, "minimum": 0, "maximum": 1},
    {"name": "kl_coef", "kind": "float", "default": 0.04, "minimum": 0, "maximum": 10},
    {"name": "group_size", "kind": "integer", "default": 8, "minimum": 2, "maximum": 64},
    {"name": "schedule", "kind": "choice", "default": "cosine", "choices": ["cosine", "constant", "linear"]},
    {"name": "packed", "kind": "boolean", "default": False},
    {"name": "tag", "kind": "string", "default": "a", "pattern": "[a-z]+"},
]


def test_ranges_log_scales_and_choices_become_dimensions():
    space = parse_space({"lr": {"low": 1e-6, "high": 1e-3, "log": True}, "group_size": {"low": 4, "high": 16},
                         "schedule": {"choices": ["cosine", "linear"]}, "packed": {"choices": [True, "false"]},
                         "tag": {"choices": ["x", "yz"]}}, PARAMS)

    assert space == [Dimension("lr", "float", 1e-6, 1e-3, log=True), Dimension("group_size", "integer", 4, 16),
                     Dimension("schedule", "choice", choices=("cosine", "linear")),
                     Dimension("packed", "choice", choices=(True, False)), Dimension("tag", "choice", choices=("x", "yz"))]
    assert space[1].to_dict() == {"name": "group_size", "low": 4, "high": 16, "log": False, "integer": True}


@pytest.mark.parametrize("space, field, says", [
    ({"lr": {"low": 1e-6, "high": 2}}, "space.lr.high", "space.lr.high must be from 0.0 to 1.0, got 2.0"),
    ({"lr": {"low": 0, "high": 1e-3, "log": True}}, "space.lr.low", "must be above 0 for a log scale"),
    ({"kl_coef": {"low": -1, "high": 1}}, "space.kl_coef.low", "space.kl_coef.low must be from 0.0 to 10.0, got -1.0"),
    ({"lr": {"low": 1e-3, "high": 1e-3}}, "space.lr.high", "space.lr.high (0.001) must be above its low (0.001)"),
    ({"lr": {"low": 1e-5}}, "space.lr.high", "space.lr.high is required"),
    ({"lr": {"low": 1e-5, "high": 1e-4, "log": "yes"}}, "space.lr.log", "space.lr.log must be true or false"),
    ({"lr": {"low": "fast", "high": 1e-4}}, "space.lr.low", "space.lr.low must be a number from 0.0 to 1.0"),
    ({"lr": {"low": 1e-5, "high": 1e-4, "step": 2}}, "space.lr.step", "takes low, high and log; got 'step'"),
    ({"group_size": {"low": 2.5, "high": 8}}, "space.group_size.low", "space.group_size.low must be an integer"),
    ({"schedule": {"low": 0, "high": 1}}, "space.schedule", "schedule is a choice parameter: give choices"),
    ({"schedule": {"choices": ["cosine", "warm"]}}, "space.schedule.choices[1]", "must be one of cosine, constant"),
    ({"schedule": {"choices": []}}, "space.schedule.choices", "must be a list of 1 to 100 values"),
    ({"packed": {"choices": [True, True]}}, "space.packed.choices", "must be distinct"),
    ({"tag": {"choices": ["UPPER"]}}, "space.tag.choices[0]", "must match [a-z]+"),
    ({"steps": {"low": 1, "high": 9}}, "space.steps", "the recipe has no parameter 'steps'; its parameters are"),
    ({"lr": 0.001}, "space.lr", "must be an object: {low, high, log} or {choices}"),
    ({}, "space", "space must be an object naming at least one parameter"),
    ([1], "space", "space must be an object naming at least one parameter"),
])
def test_a_bad_space_is_refused_naming_the_field(space, field, says):
    with pytest.raises(ParamError) as refused:
        parse_space(space, PARAMS)
    assert refused.value.field == field and says in refused.value.message, (refused.value.field,
                                                                            refused.value.message)

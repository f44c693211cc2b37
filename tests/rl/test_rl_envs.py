"""Environments: scoring of good, wrong and malformed answers, splits, the calculator."""

import pytest
import torch

from trainer.rl import ENV_NAMES, get_env
from trainer.rl.envs.toolcalc import calculate


def test_the_registry_lists_every_environment_module():
    assert ENV_NAMES == ("arithmetic", "toolcalc")
    assert get_env("toolcalc").name == "toolcalc"
    with pytest.raises(KeyError, match="unknown environment 'chess'; known: arithmetic, toolcalc"):
        get_env("chess")


@pytest.mark.parametrize(
    "prompt, completion, reward",
    [
        ("347+ 86=", " 433", 1.0),
        ("347- 86=", " 261", 1.0),
        ("  5-  5=", "   0", 1.0),
        ("999+999=", "1998", 1.0),
        ("347+ 86=", " 434", 0.1),  # well-formed but wrong: partial credit
        ("347+ 86=", "0433", 0.1),
        ("347+ 86=", "433", 0.0),  # the right number outside its 4-character field
        ("347+ 86=", "  433", 0.0),
        ("347+ 86=", "", 0.0),
        ("347+ 86=", " 43 ", 0.0),
        ("347+ 86=", "-433", 0.0),
        ("347+ 86=", "<calc>347+86</calc>", 0.0),
    ],
)
def test_arithmetic_scores_exact_wrong_and_malformed_answers(prompt, completion, reward):
    assert get_env("arithmetic").score(prompt, completion) == reward


def test_arithmetic_prompts_align_place_values_and_never_go_negative():
    env = get_env("arithmetic")
    for prompt in env.eval_prompts(200):
        assert len(prompt) == env.prompt_width and prompt[3] in "+-" and prompt.endswith("=")
        assert len(env.answer(prompt)) == 4 and int(env.answer(prompt)) >= 0


@pytest.mark.parametrize("name", ENV_NAMES)
def test_train_and_eval_splits_are_disjoint_and_deterministic(name):
    env = get_env(name)
    held_out = env.eval_prompts(300)
    assert held_out == env.eval_prompts(300)
    assert len(set(held_out)) == 300
    train = env.sample_train_prompts(300, torch.Generator().manual_seed(0))
    assert train == env.sample_train_prompts(300, torch.Generator().manual_seed(0))
    assert not set(train) & set(held_out)
    assert all(len(p) <= env.prompt_width for p in train + held_out)


@pytest.mark.parametrize(
    "expr, value",
    [("37*48", 1776), ("2+3*4", 14), ("2*3+4*5-6", 20), ("10-20-30", -40), (" 7 * 6 ", 42), ("0", 0)],
)
def test_the_calculator_computes_integer_expressions_with_precedence(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize("expr", ["", "3*", "*3", "3**4", "2+-3", "1/2", "abc", "(1+2)", "1234567890*2", "1+" * 8 + "1"])
def test_the_calculator_refuses_what_it_cannot_parse(expr):
    assert calculate(expr) is None


def test_toolcalc_answers_a_call_with_its_result_and_a_malformed_call_with_err():
    env = get_env("toolcalc")
    assert env.tool_result("<calc>37*48</calc>") == "<out>1776</out>"
    assert env.tool_result("<calc>37*</calc>") == "<err>"
    assert env.tool_result("12</calc>") == "<err>"  # closing without opening
    assert env.tool_result("<calc>1+1</calc><out>2</out>x</calc>") == "<err>"
    calls = "<calc>1+1</calc><out>2</out>" * 3
    assert env.tool_result(calls + "<calc>2+2</calc>") == "<err>"  # over the cap of 3 calls


@pytest.mark.parametrize(
    "completion, reward",
    [
        ("<calc>47*863+512</calc><out>41073</out>41073", 1.0),
        ("41073", 1.0),  # right without the tool
        ("<calc>47*863</calc><out>40561</out>41073", 1.0),
        ("<calc>47*863+512</calc><out>41073</out>41000", 0.1),
        ("<calc>47*</calc><err>41073", 1.0),  # a malformed call is only an observation
        ("<calc>47*</calc><err>", 0.0),
        ("<calc>47*863+512</calc><out>41073</out>", 0.0),  # no final answer
        ("41073<calc>", 0.0),
    ],
)
def test_toolcalc_scores_the_final_answer_after_the_last_tool_result(completion, reward):
    assert get_env("toolcalc").score("47*863+512=", completion) == reward


@pytest.mark.parametrize("name", ENV_NAMES)
def test_demonstrations_earn_full_reward(name):
    import random

    env = get_env(name)
    rng = random.Random(0)
    for prompt in env.eval_prompts(50):
        text = "".join(piece for piece, _ in env.demonstration(prompt, rng))
        assert env.score(prompt, text) == 1.0


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st


@given(st.lists(st.integers(0, 10**9 - 1), min_size=1, max_size=8), st.data())
def test_the_calculator_agrees_with_python_on_any_well_formed_expression(numbers, data):
    ops = data.draw(st.lists(st.sampled_from("+-*"), min_size=len(numbers) - 1, max_size=len(numbers) - 1))
    expr = str(numbers[0]) + "".join(op + str(n) for op, n in zip(ops, numbers[1:]))
    assert calculate(expr) == eval(expr)  # the test may trust Python; the environment never does


def test_toolcalc_warm_start_is_easier_to_reach_than_the_tool_use_it_should_learn():
    env = get_env("toolcalc")
    import random

    rng = random.Random(0)
    prompts = env.prompts(2000, rng, "train")
    with_tool = [p for p in prompts if len(env.demonstration(p, rng)) == 3]
    share = len(with_tool) / len(prompts)
    assert 0.3 < share < 0.5  # the base policy calls the calculator on a minority of problems

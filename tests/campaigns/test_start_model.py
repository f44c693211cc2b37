"""The folder run 1 of a campaign of launched runs started from (what its evaluation recipe scores as the start):
read off run 1's argv where the next runs' recipe puts {init_from}."""

from pathlib import Path

import yaml

from campaigns.models import start_model
from launch.models import clean_definition
from launch.params import render

EXAMPLES = Path(__file__).resolve().parents[2] / "launch" / "examples" / "recipes.yaml"


def _shipped(name):
    raw = next(r for r in yaml.safe_load(EXAMPLES.read_text())["recipes"] if r["name"] == name)
    return clean_definition({k: v for k, v in raw.items() if k != "name"})


def test_it_is_the_value_after_the_same_flag_in_the_shipped_trl_recipes():
    first, following = _shipped("trl-grpo"), _shipped("trl-grpo-continue")
    values = {p["name"]: p["default"] for p in first["params"]}
    argv = render(first["argv"], {**values, "python": "python", "yardstick": "/y", "job_dir": "/d/job-1",
                                  "model": "/models/tiny-gpt2", "models": "/data/models"})
    assert start_model(first, following, argv) == "/models/tiny-gpt2"


def test_it_is_the_text_inside_the_same_override():
    first = {"argv": ["python3", "-m", "verl", "actor.model.path={model}", "trainer.steps={steps}"]}
    following = {"argv": ["python3", "-m", "verl", "actor.model.path={init_from}", "trainer.steps={steps}"]}
    argv = ["python3", "-m", "verl", "actor.model.path=/models/qwen", "trainer.steps=10"]
    assert start_model(first, following, argv) == "/models/qwen"


def test_it_is_none_when_the_recipes_do_not_line_up():
    first = {"argv": ["python", "train.py", "--model", "{model}"]}
    following = {"argv": ["python", "train.py", "--init", "{init_from}"]}
    assert start_model(first, following, ["python", "train.py", "--model", "/models/m"]) is None
    assert start_model(first, {"argv": ["{init_from}"]}, ["python", "train.py", "--model", "/m"]) is None


def test_the_shipped_examples_score_with_eval_checkpoint_and_train_on_with_their_continue_recipes():
    from launch.models import continues_training, evaluates

    names = [r["name"] for r in yaml.safe_load(EXAMPLES.read_text())["recipes"]]
    assert [n for n in names if evaluates(_shipped(n))] == ["eval-checkpoint"]
    assert [n for n in names if continues_training(_shipped(n))] == [
        "trl-grpo-continue", "trl-grpo-cpu-continue", "builtin-grpo-continue", "builtin-grpo-cpu-continue"]

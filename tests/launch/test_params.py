"""A recipe's typed parameters and the argv they fill (launch/params.py): a value is one literal argument."""

import subprocess
import sys

import pytest

from launch.params import Param, ParamError, placeholders, render

STEPS = {"name": "steps", "kind": "integer", "default": 100, "minimum": 1, "maximum": 10_000, "help": "GRPO steps"}


def test_an_integer_is_checked_against_its_bounds_and_named_when_wrong():
    steps = Param(STEPS)
    assert steps.value("250") == 250 and steps.value(7) == 7 and steps.value(3.0) == 3
    for raw, said in [(0, "steps must be from 1 to 10000, got 0"), ("ten", "steps must be an integer from 1 to 10000"),
                      (2.5, "steps must be an integer, got 2.5"), (True, "steps must be an integer, got True")]:
        with pytest.raises(ParamError, match=said):
            steps.value(raw)


def test_each_kind_takes_what_it_accepts_and_says_what_that_is():
    lr = Param({"name": "lr", "kind": "float", "default": 1e-6, "minimum": 0})
    assert lr.value("3e-5") == 3e-5
    with pytest.raises(ParamError, match="lr must be a finite number"):
        lr.value(float("nan"))
    model = Param({"name": "model", "kind": "choice", "default": "tiny", "choices": ["tiny", "small"]})
    with pytest.raises(ParamError, match="model must be one of tiny, small, got 'huge'"):
        model.value("huge")
    flag = Param({"name": "bf16", "kind": "boolean", "default": False})
    assert (flag.value("true"), flag.value(False)) == (True, False)
    with pytest.raises(ParamError, match="bf16 must be true or false, got 'yes'"):
        flag.value("yes")
    run = Param({"name": "run_name", "kind": "string", "default": "a", "pattern": "[a-z0-9-]+"})
    with pytest.raises(ParamError, match=r"run_name must match \[a-z0-9-\]\+, got 'A B'"):
        run.value("A B")
    data = Param({"name": "data", "kind": "path", "default": "gsm8k", "root": "/data"})
    assert data.value("gsm8k/train.parquet") == "/data/gsm8k/train.parquet"
    for escape in ("../etc/passwd", "/etc/passwd", "a/../../b"):
        with pytest.raises(ParamError, match="data must be a path under /data"):
            data.value(escape)


def test_a_bad_definition_is_refused_naming_its_field():
    cases = [({**STEPS, "maximum": 0}, "params.steps.maximum", "below its minimum"),
             ({**STEPS, "default": 0}, "params.steps.default", "must be from 1 to 10000"),
             ({"name": "job_dir", "kind": "string", "default": ""}, "params[0].name", "Yardstick's to fill"),
             ({"name": "x", "kind": "list", "default": []}, "params.x.kind", "must be one of integer, float"),
             ({"name": "x", "kind": "string", "default": "", "pattern": "("}, "params.x.pattern", "not a regular"),
             ({"name": "x", "kind": "path", "default": "a", "root": "rel"}, "params.x.root", "absolute path"),
             ({"name": "x", "kind": "integer"}, "params.x.default", "is required")]
    for spec, field, said in cases:
        with pytest.raises(ParamError, match=said) as caught:
            Param(spec, "params[0]")
        assert caught.value.field == field


def test_placeholders_are_names_only_and_literal_braces_are_doubled():
    assert placeholders("--steps={steps}", "argv[1]") == ["steps"]
    assert placeholders("trainer.logger=['mlflow']", "argv[2]") == []
    assert render(["--json={{\"a\": {n}}}"], {"n": 3}) == ['--json={"a": 3}']
    for item in ("{steps!r}", "{steps:>5}", "{a.b}", "{"):
        with pytest.raises(ParamError):
            placeholders(item, "argv[0]")


def test_a_hostile_value_reaches_the_program_as_one_literal_argument(tmp_path):
    hostile = "; rm -rf / $(id) `id` && echo pwned | cat > x"
    name = Param({"name": "run_name", "kind": "string", "default": "x"})
    argv = render([sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", "--name={run_name}",
                   "{run_name}"], {"run_name": name.value(hostile)})
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tmp_path)  # no shell, as a worker runs it
    assert out.stdout.strip() == __import__("json").dumps([f"--name={hostile}", hostile])
    assert list(tmp_path.iterdir()) == [], "nothing the value says was run"

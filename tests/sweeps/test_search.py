"""The search (sweeps/search.py): a real Optuna study replayed from the trials' records each pass. The same records
ask the same values; each value is one its parameter accepts; what each objective tells Optuna; the front; and
Optuna's parameter importance."""

import math
import random
import sys

import pytest

from launch.params import Param
from launch.space import parse_space
from sweeps import search
from sweeps.search import Told

PARAMS = [{"name": "lr", "kind": "float", "default": 1e-3, "minimum": 1e-7, "maximum": 1.0},
          {"name": "kl_coef", "kind": "float", "default": 0.04, "minimum": 0.0, "maximum": 1.0},
          {"name": "group", "kind": "integer", "default": 8, "minimum": 2, "maximum": 64},
          {"name": "schedule", "kind": "choice", "default": "cosine", "choices": ["cosine", "constant"]}]
SPACE = parse_space({"lr": {"low": 1e-5, "high": 1e-2, "log": True}, "kl_coef": {"low": 0.0, "high": 0.5},
                     "group": {"low": 4, "high": 16}, "schedule": {"choices": ["cosine", "constant"]}}, PARAMS)


def hill(p):
    """Points per dollar, best at lr 1e-3 and kl_coef 0."""
    return 10.0 - abs(math.log10(p["lr"]) + 3) * 3 - p["kl_coef"] * 2


def run(objective, n, seed=7, value=hill):
    trials = []
    for i in range(n):
        p = search.ask(SPACE, objective, trials, seed)
        trials.append(Told(i, p, "ended", score=50 + value(p), gain=value(p), usd=1.0))
    return trials


def test_the_same_trials_ask_the_same_values_each_a_value_its_parameter_accepts():
    trials = run("per_dollar", 6)
    assert search.ask(SPACE, "per_dollar", trials, 7) == search.ask(SPACE, "per_dollar", trials, 7)
    assert search.ask(SPACE, "per_dollar", trials, 7) != search.ask(SPACE, "per_dollar", trials, 8)
    params = {p["name"]: Param(p) for p in PARAMS}
    for t in trials:
        assert {k: params[k].value(v) for k, v in t.params.items()} == t.params
        assert 1e-5 <= t.params["lr"] <= 1e-2 and isinstance(t.params["group"], int)
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 6, "the first trials differ: seeded per trial"


def test_tpe_finds_better_trials_than_its_first_random_ones():
    trials = run("per_dollar", 24, seed=1)
    first, later = trials[:search.STARTUP_TRIALS], trials[-8:]
    assert max(hill(t.params) for t in later) > max(hill(t.params) for t in first)


@pytest.mark.parametrize("objective, told", [
    ("front", ([40.0, 2.5], None)), ("per_dollar", ([4.0], None)), ("cheapest", ([2.5], {"score": 10.0}))])
def test_what_each_objective_tells_optuna_of_an_ended_trial(objective, told):
    trial = Told(0, {}, "ended", score=40.0, gain=10.0, usd=2.5)
    assert search.values(objective, trial, target=50) == told


def test_a_trial_without_a_score_or_dollars_is_told_as_failed_and_a_running_one_as_running():
    trials = [Told(0, {"lr": 1e-3, "kl_coef": 0.1, "group": 8, "schedule": "cosine"}, "ended", score=None, usd=1.0),
              Told(1, {"lr": 1e-4, "kl_coef": 0.1, "group": 8, "schedule": "cosine"}, "ended", score=5, gain=0, usd=0),
              Told(2, {"lr": 1e-2, "kl_coef": 0.2, "group": 4, "schedule": "constant"}, "running"),
              Told(3, {"lr": 1e-3, "kl_coef": 0.0, "group": 9, "schedule": "cosine"}, "failed", score=1, usd=1.0)]
    study = search.study(SPACE, "per_dollar", trials, seed=0)
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL", "RUNNING", "FAIL"]
    assert search.ask(SPACE, "per_dollar", trials, 0)["lr"] > 0


def test_the_cheapest_objective_prefers_the_cheapest_trial_that_reaches_the_target():
    trials = [Told(0, {"lr": 1e-3, "kl_coef": 0.1, "group": 8, "schedule": "cosine"}, "ended", score=40, usd=1.0),
              Told(1, {"lr": 1e-4, "kl_coef": 0.1, "group": 8, "schedule": "cosine"}, "ended", score=75, usd=3.0),
              Told(2, {"lr": 1e-2, "kl_coef": 0.2, "group": 4, "schedule": "constant"}, "ended", score=80, usd=5.0)]
    study = search.study(SPACE, "cheapest", trials, seed=0, target=72)
    assert study.best_trial.number == 1, "trial 0 is cheaper but short of 72 points"


def test_the_front_is_the_trials_nothing_beats_in_order_of_dollars():
    points = [(50, 1.0), (60, 2.0), (55, 2.5), (60, 3.0), (70, 4.0), (40, 0.5), (40, 0.7)]
    assert search.front(points) == [5, 0, 1, 4]


def test_importance_says_which_parameter_moves_the_objective(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # `make run` installs no scikit-learn: importance needs none
    rng = random.Random(3)
    trials = []
    for i in range(20):  # spread over the space (TPE's would crowd where lr is good)
        p = {"lr": 10 ** rng.uniform(-5, -2), "kl_coef": rng.uniform(0, 0.5), "group": rng.randint(4, 16),
             "schedule": rng.choice(["cosine", "constant"])}
        value = -abs(math.log10(p["lr"]) + 3) * 10
        trials.append(Told(i, p, "ended", score=50 + value, gain=value, usd=1.0))
    shares = search.importance(SPACE, "per_dollar", trials)["points per dollar"]
    assert set(shares) == {"lr", "kl_coef", "group", "schedule"}
    assert max(shares, key=shares.get) == "lr" and sum(shares.values()) == pytest.approx(1.0)
    assert search.importance(SPACE, "per_dollar", trials[:1]) == {}, "one trial apportions nothing"
    front = search.importance(SPACE, "front", trials)
    assert list(front) == ["score"], "every trial cost the same: nothing explains the dollars"
    assert max(front["score"], key=front["score"].get) == "lr"


def test_narrowing_around_a_trial_takes_a_quarter_of_each_range_inside_the_old_one():
    """lr 1e-5..1e-2 on a log scale is 3 decades: a quarter is 0.75 of a decade, centred on 1e-3 (10^-3.375 to
    10^-2.625); kl_coef 0..0.5 around 0.01 would cross 0, so it is moved inside: 0 to 0.125; group 4..16 around 15:
    a quarter of 12 is 3, moved inside the top end: 13 to 16; the choice stays whole."""
    narrowed = {d.name: d for d in search.narrow(SPACE, {"lr": 1e-3, "kl_coef": 0.01, "group": 15,
                                                          "schedule": "constant"})}
    lr = narrowed["lr"]
    assert lr.log and lr.low == pytest.approx(10 ** -3.375) and lr.high == pytest.approx(10 ** -2.625)
    assert (narrowed["kl_coef"].low, narrowed["kl_coef"].high) == (0.0, pytest.approx(0.125))
    assert (narrowed["group"].kind, narrowed["group"].low, narrowed["group"].high) == ("integer", 13, 16)
    assert narrowed["schedule"] == SPACE[3]
    # What the narrowed space asks is inside it; a trial drawn before, outside it, is left out of its study.
    new = list(narrowed.values())
    asked = search.ask(new, "per_dollar", [], 3)
    assert search.inside(new, asked) and search.inside(SPACE, asked)
    old = Told(0, {"lr": 1e-5, "kl_coef": 0.4, "group": 4, "schedule": "cosine"}, "ended", score=1, gain=1, usd=1.0)
    near = Told(1, {"lr": 1e-3, "kl_coef": 0.01, "group": 15, "schedule": "cosine"}, "ended", score=2, gain=2, usd=1.0)
    assert not search.inside(new, old.params) and search.inside(new, near.params)
    assert len(search.study(new, "per_dollar", [old, near], 0).trials) == 1
    # An integer range already two values wide keeps two.
    two = parse_space({"group": {"low": 4, "high": 5}}, PARAMS)
    assert [(d.low, d.high) for d in search.narrow(two, {"group": 5})] == [(4, 5)]

"""The search of a sweep: Optuna's samplers, asked for the next trial's parameters from the trials so far.

Yardstick keeps no Optuna storage. Each pass replays the sweep's trials, read from Yardstick's own rows (their
parameters, and their scores and dollars as the cost figures give them now), into a new in-memory study, tells it
what each ended trial bought, and asks it for the next parameters. One source of truth: a trial's dollars keep
changing after it ends (attribution charges whole minutes a minute or two late, an admin's price fix re-prices
them), and a copy of them in Optuna's tables would drift from the figures every page shows. A restart loses
nothing: the rows are the study. The sampler is seeded with the sweep's seed and the trial's number, so a pass
asks for the same parameters given the same trials.

The objectives (docs/sweeps.md):
- front: the highest score for the fewest dollars, two objectives (maximise the score, minimise the dollars);
- per_dollar: the most points per dollar, the net gain (newest score minus the first) over the dollars;
- cheapest: the fewest dollars among trials that reach `target` points (a constraint: target - score <= 0).

The sampler is TPE for all three (multi-objective TPE for the front): sweeps run tens of trials, where NSGA-II's
generations of a population would still be drawing at random. Running trials are told as running (TPE's
constant liar keeps parallel trials apart). A trial the sweep stopped early is told what it reached for what it
spent, a real point of the front; a failed trial, or one with no score or no dollars, as failed (not learned from).

Imports nothing from Django: it is given plain records (tests/sweeps/test_search.py). Optuna is imported where a
search or an importance is computed, not with this module: every Django process imports it (the sweeps' models name
the objectives), and Optuna's importance module alone takes seconds to load scikit-learn where it is installed.
"""

import math
import warnings
from dataclasses import dataclass

from launch.space import Dimension

OBJECTIVES = {
    "front": "the highest score for the fewest dollars (score and dollars, two objectives)",
    "per_dollar": "the most points per dollar (net gain over dollars)",
    "cheapest": "the fewest dollars for a run that reaches the target score",
}
STARTUP_TRIALS = 4  # drawn at random before TPE models the space


def _optuna():
    """Optuna, loaded on first use, quiet but for warnings."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass(frozen=True)
class Told:
    """A trial as the search sees it: `state` running, ended (its figures are final or at its stop) or failed;
    `score` its newest score, `gain` over its first, `usd` the dollars charged to it (float)."""

    number: int
    params: dict
    state: str
    score: float | None = None
    gain: float | None = None
    usd: float | None = None


def distributions(space):
    """{name: Optuna distribution} of a sweep's space ([Dimension])."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out = {}
    for d in space:
        if d.kind == "choice":
            out[d.name] = CategoricalDistribution(list(d.choices))
        elif d.kind == "integer":
            out[d.name] = IntDistribution(int(d.low), int(d.high), log=d.log)
        else:
            out[d.name] = FloatDistribution(float(d.low), float(d.high), log=d.log)
    return out


def values(objective, trial, target=None):
    """(values, constraints) Optuna is told for an ended trial, or None when it bought nothing to learn from."""
    if trial.score is None or trial.usd is None or not math.isfinite(trial.score):
        return None
    if objective == "front":
        return [trial.score, trial.usd], None
    if objective == "per_dollar":
        if trial.gain is None or trial.usd <= 0:
            return None
        return [trial.gain / trial.usd], None
    return [trial.usd], {"score": float(target) - trial.score}


def study(space, objective, trials, seed, target=None):
    """A new in-memory study holding `trials` ([Told]); its sampler seeded by `seed`."""
    optuna = _optuna()
    from optuna.trial import TrialState, create_trial

    directions = {"front": ["maximize", "minimize"], "per_dollar": ["maximize"], "cheapest": ["minimize"]}[objective]
    sampler = optuna.samplers.TPESampler(seed=seed % 2**32, n_startup_trials=STARTUP_TRIALS, multivariate=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        out = optuna.create_study(directions=directions, sampler=sampler)
    dists = distributions(space)
    for t in sorted(trials, key=lambda t: t.number):
        if not inside(space, t.params):
            continue  # drawn before the space was narrowed, outside it now: the study of the new space leaves it out
        params = {k: v for k, v in t.params.items() if k in dists}
        told = values(objective, t, target) if t.state == "ended" else None
        if t.state == "running":
            frozen = create_trial(state=TrialState.RUNNING, params=params, distributions=dists)
        elif told is None:
            frozen = create_trial(state=TrialState.FAIL, params=params, distributions=dists)
        else:
            frozen = create_trial(state=TrialState.COMPLETE, values=told[0], params=params, distributions=dists,
                                  constraints=told[1])
        out.add_trial(frozen)
    return out


def ask(space, objective, trials, seed, target=None):
    """The next trial's parameters ({name: value}, each a value its parameter accepts)."""
    import numpy as np

    optuna = _optuna()
    number = len(trials)
    # The sweep's seed and the trial's number, mixed: seeds 1, 2, 3 ... would start alike random streams.
    mixed = int(np.random.SeedSequence([seed, number]).generate_state(1)[0])
    s = study(space, objective, trials, mixed, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        trial = s.ask(distributions(space))
    by_name = {d.name: d for d in space}
    return {name: _plain(by_name[name], value) for name, value in trial.params.items()}


def inside(space, params):
    """Whether `params` ({name: value}) lie within each of the space's dimensions (a trial of a narrowed sweep drawn
    before it was narrowed may not)."""
    for d in space:
        value = params.get(d.name)
        if d.kind == "choice":
            if value not in d.choices:
                return False
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not d.low <= value <= d.high:
            return False
    return True


NARROW_SHARE = 0.25  # "narrow around the best": each range to a quarter of its width (of its log width on a log scale)


def narrow(space, around, share=NARROW_SHARE):
    """A space ([Dimension]) around a trial's values (`around`, {name: value}): each range `share` of its width,
    centred on the value and moved inside the old range where it would cross an end; on a log scale in log units.
    Choices are kept whole (a choice has no "around"); an integer range keeps at least two values."""
    out = []
    for d in space:
        value = around.get(d.name)
        if d.kind == "choice" or isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append(d)
            continue
        scale, unscale = (math.log, math.exp) if d.log else (float, float)
        low, high, v = scale(d.low), scale(d.high), scale(min(max(value, d.low), d.high))
        width = (high - low) * share
        start = min(max(v - width / 2, low), high - width)
        new_low, new_high = unscale(start), unscale(start + width)
        if d.kind == "integer":
            new_low, new_high = max(int(d.low), math.floor(new_low)), min(int(d.high), math.ceil(new_high))
            if new_high <= new_low:
                new_low, new_high = (new_low, new_low + 1) if new_low < d.high else (new_high - 1, new_high)
        else:
            # The ends exactly the old ones where they meet them (exp(log(x)) can miss x by a rounding)
            new_low = d.low if start <= low else max(d.low, new_low)
            new_high = d.high if start + width >= high else min(d.high, new_high)
        out.append(Dimension(d.name, d.kind, low=new_low, high=new_high, log=d.log))
    return out


def _plain(dimension, value):
    if dimension.kind == "integer":
        return int(value)
    if dimension.kind == "float":
        return float(value)
    return value


IMPORTANCE_QUANTILE = 0.25  # the best quarter of the trials, told from the rest


def importance(space, objective, trials, target=None):
    """{objective's name: {parameter: its share of the importance, 0 to 1}} by Optuna's PED-ANOVA (its default
    evaluator, needing no scikit-learn): how much each parameter's values tell the best quarter of the ended trials
    from all of them. {} while fewer than two trials can be told (or no parameter varies)."""
    optuna = _optuna()
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
    from optuna.trial import TrialState

    searched = [d for d in space if d.kind != "choice" or len(d.choices) > 1]
    if not searched:
        return {}
    s = study(space, objective, trials, 0, target)
    done = [t for t in s.trials if t.state == TrialState.COMPLETE]
    if len(done) < 2:
        return {}
    names = {"front": ["score", "dollars"], "per_dollar": ["points per dollar"], "cheapest": ["dollars"]}[objective]
    out = {}
    for i, (name, direction) in enumerate(zip(names, s.directions, strict=True)):
        sign = -1.0 if direction == optuna.study.StudyDirection.MAXIMIZE else 1.0  # PED-ANOVA: lower is better
        if len({t.values[i] for t in done}) < 2:
            continue  # every told trial alike: nothing to apportion
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # it warns that it ranks low targets first: they are, by `sign`
            got = get_param_importances(s, evaluator=PedAnovaImportanceEvaluator(target_quantile=IMPORTANCE_QUANTILE),
                                        target=lambda t, i=i, sign=sign: sign * t.values[i])
        if any(v > 0 for v in got.values()):
            out[name] = {k: float(v) for k, v in got.items()}
    return out


def front(points):
    """The indices of `points` ([(score, dollars)]) no other point beats: none has as high a score for no more
    dollars and is better in one of the two. In order of dollars."""
    out = []
    for i, (s, d) in enumerate(points):
        beaten = any((s2 >= s and d2 <= d) and (s2 > s or d2 < d) for j, (s2, d2) in enumerate(points) if j != i)
        if not beaten:
            out.append(i)
    return sorted(out, key=lambda i: (points[i][1], -points[i][0]))


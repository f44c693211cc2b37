"""The dollars a sweep spends until it holds a trial within 5 % of the best points per dollar, against random search
over the same space with the same trials at once, on a known score(parameters, dollars) surface (figures, not a
test).

    python bench/sweep.py                  # 5 seeds, 3 trials at once
    python bench/sweep.py --seeds 10 --parallel 4

Both methods run on the same simulated clock: every running trial spends STEP_USD a step and records a score every
EVAL_EVERY steps, scores being a known function of its parameters and of its steps (the surface below, with noise
seeded per trial). The sweep asks sweeps.search (Optuna's TPE, replayed from its trials as the sweep's pass does)
for each trial's values, and stops trials by the dollar with sweeps.stopping.judge, as the sweep's pass does;
random search draws each trial's values uniformly (log-uniform where the space is log) and runs each to its end;
"TPE alone" is the sweep's search without stopping by the dollar, to show what each part buys.
A method "holds" the goal once a trial of it has completed with points per dollar within 5 % of the surface's best
(found on a dense grid); what it spent by then, every trial's dollars summed, is its figure. The clock is simulated:
the jobs, the line and attribution are not what is measured here (tests/sweeps/test_sweep_run.py runs real ones).
Goal: the sweep spends at most half what random search does, over the seeds.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launch.space import Dimension  # noqa: E402
from sweeps import search  # noqa: E402
from sweeps.stopping import Point, judge  # noqa: E402

STEP_USD = Decimal("0.05")
EVAL_EVERY = 2
MAX_TRIALS = 200
SPACE = [Dimension("lr", "float", 1e-5, 1e-1, log=True), Dimension("kl_coef", "float", 0.0, 1.0),
         Dimension("steps", "integer", 10, 60)]
WARMUP = 8  # steps before any gain


def gain(p, step):
    """Points gained by step `step` of a trial with parameters `p` (noise aside): a plateau that depends on lr and
    kl_coef, reached at a rate that depends on lr, after WARMUP steps of nothing."""
    x = math.log10(p["lr"])
    plateau = 60.0 * math.exp(-((x + 3.0) / 1.5) ** 2) * (1.0 - 0.8 * (p["kl_coef"] - 0.3) ** 2) + 2.0
    rate = 0.12 * 10 ** (0.3 * (x + 3.0))
    return plateau * max(0.0, 1.0 - math.exp(-rate * max(0, step - WARMUP)))


def ppd(p):
    return gain(p, p["steps"]) / float(p["steps"] * STEP_USD)


def best_ppd():
    best = 0.0
    for i in range(121):
        for k in range(11):
            for steps in range(10, 61):
                best = max(best, ppd({"lr": 10 ** (-5 + 4 * i / 120), "kl_coef": k / 10, "steps": steps}))
    return best


class Trial:
    def __init__(self, number, params, seed):
        self.number, self.params, self.step, self.state = number, params, 0, "running"
        self.noise = random.Random(seed * 1_000_003 + number)
        self.curve = [Point(Decimal(0), 0.0)]

    @property
    def usd(self):
        return self.step * STEP_USD

    def advance(self):
        self.step += 1
        if self.step % EVAL_EVERY == 0 or self.step == self.params["steps"]:
            self.curve.append(Point(self.usd, gain(self.params, self.step) + self.noise.gauss(0, 0.5)))
        if self.step == self.params["steps"]:
            self.state = "ended"

    def told(self):
        score = self.curve[-1].score if len(self.curve) > 1 else None
        return search.Told(self.number, self.params, self.state, score=score, gain=score,
                           usd=float(self.usd) if self.state != "running" else None)


def random_params(rng):
    out = {}
    for d in SPACE:
        if d.log:
            out[d.name] = 10 ** rng.uniform(math.log10(d.low), math.log10(d.high))
        elif d.kind == "integer":
            out[d.name] = rng.randint(int(d.low), int(d.high))
        else:
            out[d.name] = rng.uniform(d.low, d.high)
    return out


def run(method, seed, parallel, goal):
    """(dollars spent when a completed trial first reached the goal, trials started, trials stopped early); the
    dollars of MAX_TRIALS trials, marked by the trial count, when none did."""
    rng = random.Random(seed)
    trials, spent, stopped = [], Decimal(0), 0
    while len(trials) < MAX_TRIALS:
        while sum(t.state == "running" for t in trials) < parallel:
            params = (random_params(rng) if method == "random"
                      else search.ask(SPACE, "per_dollar", [t.told() for t in trials], seed))
            trials.append(Trial(len(trials), params, seed))
        for t in [t for t in trials if t.state == "running"]:
            t.advance()
            spent += STEP_USD
            if t.state == "ended" and ppd_of(t) >= goal:
                return spent, len(trials), stopped
            if method == "sweep" and t.state == "running" and t.step % EVAL_EVERY == 0:
                earlier = [(e.curve, e.usd) for e in trials if e.state == "ended" and e is not t]
                if judge(t.curve, earlier):
                    t.state = "ended"  # stopped by the sweep: told what it reached for what it spent
                    stopped += 1
    return spent, len(trials), stopped


def capped(n):
    """A trial count, starred where the method stopped at MAX_TRIALS short of the goal (its dollars then a floor)."""
    return f"{n}*" if n >= MAX_TRIALS else str(n)


def ppd_of(t):
    return t.curve[-1].score / float(t.usd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--parallel", type=int, default=3)
    args = ap.parse_args()
    best = best_ppd()
    goal = 0.95 * best
    print(f"surface: best {best:.2f} points per dollar (dense grid); goal: a completed trial at {goal:.2f} or more; "
          f"{args.parallel} trials at once; ${STEP_USD} a step")
    print(f"{'seed':>4} {'sweep $':>9} {'trials':>6} {'stopped':>7} {'random $':>9} {'trials':>6} {'ratio':>6} "
          f"{'TPE alone $':>11} {'s':>6}")
    ratios, sweeps, randoms, alone = [], [], [], []
    for seed in range(args.seeds):
        started = time.perf_counter()
        s_usd, s_n, s_stopped = run("sweep", seed, args.parallel, goal)
        r_usd, r_n, _ = run("random", seed, args.parallel, goal)
        t_usd, _, _ = run("tpe", seed, args.parallel, goal)
        ratios.append(float(s_usd / r_usd))
        sweeps.append(float(s_usd))
        randoms.append(float(r_usd))
        alone.append(float(t_usd))
        print(f"{seed:>4} {s_usd:>9.2f} {capped(s_n):>6} {s_stopped:>7} {r_usd:>9.2f} {capped(r_n):>6} {ratios[-1]:>6.2f} "
              f"{t_usd:>11.2f} {time.perf_counter() - started:>6.1f}")
    print(f"(* stopped at {MAX_TRIALS} trials short of the goal: its dollars are a floor of what it would spend)")
    total = sum(sweeps) / sum(randoms)
    print(f"sweep / random, dollars to the goal: {total:.2f} over all seeds (median of the seeds' ratios "
          f"{statistics.median(ratios):.2f}); goal ≤ 0.50: {'met' if total <= 0.5 else 'NOT met'}")
    print(f"TPE alone (no stopping by the dollar) / random: {sum(alone) / sum(randoms):.2f}; "
          f"the sweep / TPE alone: {sum(sweeps) / sum(alone):.2f}")


if __name__ == "__main__":
    main()

"""Stopping by the dollar: whether a running trial of a sweep is stopped early, and the sentence that says why.

A trial's curve is its score against the dollars it had spent when each score was recorded (costs.intelligence.
score_cost_curve). At its newest score, s points at d dollars, each earlier trial that spent at least d dollars
had some score at d: the newest it recorded at d dollars or less. When at least `min_trials` earlier trials reached
d, and more than `share` of them (default a half: below their median) had a higher score there than s, the trial is
stopped: its dollars would buy less than most of the trials before it bought with the same money.

    stopped by the sweep: 18 points at $4.10 where 3 of 4 earlier trials had 25 or more

A trial's first score is never judged (it is the score of the model it starts from, the same for every trial), nor
any before it has spent `warmup` (default a quarter) of what the longest earlier trial spent: early in a
run scores move by noise more than by learning, and a rule that judged them would stop good trials on a coin's
toss. docs/sweeps.md says it for users.

Imports nothing from Django: a pure core, tested alone (tests/sweeps/test_stopping.py).
"""

from dataclasses import dataclass
from decimal import Decimal

SHARE_DEFAULT = 0.5
MIN_TRIALS_DEFAULT = 3
WARMUP_DEFAULT = 0.25


@dataclass(frozen=True)
class Point:
    usd: Decimal
    score: float


def score_at(curve, usd):
    """The newest score of `curve` ([Point] in time order) recorded at `usd` dollars or less; None when none was."""
    found = None
    for p in curve:
        if p.usd <= usd:
            found = p.score
    return found


def judge(curve, earlier, share=SHARE_DEFAULT, min_trials=MIN_TRIALS_DEFAULT, money=str, warmup=WARMUP_DEFAULT):
    """The reason to stop a running trial whose curve is `curve`, or "" to let it run.

    `earlier`: [(curve, dollars spent in all)] of the sweep's earlier trials that ended (a failed one is left out by
    the caller); `money`: how dollars are written (costs.money.usd_text on the pages)."""
    if len(curve) < 2 or min_trials < 1:
        return ""
    now = curve[-1]
    if not earlier or now.usd < Decimal(str(warmup)) * max(s for _, s in earlier):
        return ""
    reached = [score_at(c, now.usd) for c, spent in earlier if spent >= now.usd]
    reached = [s for s in reached if s is not None]
    better = [s for s in reached if s > now.score]
    if len(reached) < min_trials or len(better) <= share * len(reached):
        return ""
    return (f"stopped by the sweep: {now.score:g} points at {money(now.usd)} where {len(better)} of {len(reached)} "
            f"earlier trials had {min(better):g} or more")

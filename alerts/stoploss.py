"""Stop-loss: stop a running job whose rule (trainer/stoploss.py) finds it no longer buying intelligence.

Evaluated with the alert rules (alerts.tasks.evaluate, every 30 s) from what is
already stored: the job's eval scores against the dollars it was charged by
each (costs.intelligence.score_cost_curve) and its step metrics (the alert
conditions reward_drop, kl_high and entropy_low, scoped to the job).

The marginal rule: take the newest eval E (dollars c_E, score s_E) and the
newest earlier eval S with c_E - c_S >= usd (the rule's window; none yet: the
rule waits). It fires when s_E - s_S < points. Only evals at or after the
rule's `from_step` count, so a resumed job spends the window again first.

What it saved, recorded when it fires (an estimate, and labelled so wherever
shown): the steps the job was configured to run and had not run, times its own
recent dollars per step, which is (c_E - c_S) / (steps from S to E) for the
marginal rule, and the dollars of its last `steps` steps divided by them for a
collapse rule (each by `spent_by` at the steps' recorded times). An external
run with no configured step count has no projection.
"""

import logging
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from alerts.conditions import entropy_low, kl_high, reward_drop
from alerts.models import AlertRule
from costs.intelligence import score_cost_curve, spent_by
from costs.money import exact_usd, usd_text
from trainer.models import Job, Status, Step

log = logging.getLogger(__name__)

SMALL_STEP_USD = Decimal("0.0001")
COLLAPSE = {"reward_drop": ("reward_drop", reward_drop), "kl_max": ("kl_high", kl_high),
            "entropy_min": ("entropy_low", entropy_low)}


def check(now=None):
    """Stop every running job whose stop-loss fires now; return their ids."""
    now = now or timezone.now()
    stopped = []
    for job in Job.objects.filter(status=Status.RUNNING, stop_loss_outcome={}).exclude(stop_loss={}):
        try:
            outcome = marginal(job) or collapse(job, now)
            if outcome is None:
                continue
            outcome["at"] = now.isoformat()
            outcome.update(_saved(job, outcome))
        except Exception:  # one job's odd data must not keep the other jobs' rules from being judged
            log.exception("job %s: its stop-loss could not be evaluated", job.pk)
            continue
        if job.stop_for_loss(outcome):
            log.info("job %s: %s", job.pk, outcome["reason"])
            stopped.append(job.pk)
    return stopped


def marginal(job):
    """The marginal rule's finding ({rule, reason, window}) when the last `usd` bought fewer than
    `points` points, else None."""
    rule = job.stop_loss
    if "usd" not in rule:
        return None
    window, floor = Decimal(rule["usd"]), rule["points"]
    curve = [p for p in score_cost_curve(job) if p["pass1"] is not None and p["step"] >= rule.get("from_step", 0)]
    if len(curve) < 2:
        return None
    end = curve[-1]
    earlier = [p for p in curve[:-1] if usd(end) - usd(p) >= window]
    if not earlier:
        return None
    start = earlier[-1]
    gain = end["pass1"] - start["pass1"]
    if gain >= floor:
        return None
    spent = usd(end) - usd(start)
    return {
        "rule": "marginal",
        "reason": (f"stop-loss: steps {start['step']} to {end['step']} cost {usd_text(spent)} and bought "
                   f"{gain:+.1f} points, fewer than {floor:g} point{'' if floor == 1 else 's'} for ${rule['usd']}"),
        "window": {"from_step": start["step"], "to_step": end["step"], "usd": exact_usd(spent), "points": gain},
        "rate_steps": (start["step"], end["step"]), "rate_at": (start["at"], end["at"]),
    }


def usd(point):
    """A score_cost_curve point's dollars (kept there to the micro-dollar) as a Decimal."""
    return Decimal(repr(point["cost_usd"]))


def collapse(job, now):
    """The first collapse rule of the job that holds for its `steps` steps ({rule, reason}), else None."""
    rule = job.stop_loss
    steps = rule.get("steps", 0)
    if not steps or job.steps_done - rule.get("from_step", 0) < steps:
        return None
    for key, (kind, condition) in COLLAPSE.items():
        if key not in rule:
            continue
        probe = AlertRule(kind=kind, threshold=rule[key], duration=steps, scope=f"job:{job.pk}")
        found = condition(probe, now).get(f"job:{job.pk}")
        if found:
            rows = list(Step.objects.filter(job=job, step__gt=0).order_by("-step").values_list("step", "at")[:steps + 1])
            first, last = rows[-1], rows[0]
            return {"rule": kind, "reason": f"stop-loss: {found[1]}",
                    "rate_steps": (first[0], last[0]), "rate_at": (first[1].isoformat(), last[1].isoformat())}
    return None


def _saved(job, outcome):
    """{usd_per_step, steps_left, saved_usd, projection}: the estimate of what stopping now saves."""
    (a, b), (at_a, at_b) = outcome.pop("rate_steps"), outcome.pop("rate_at")
    before, after = spent_by(job, [datetime.fromisoformat(at_a), datetime.fromisoformat(at_b)])
    per_step = (after - before) / (b - a) if b > a else None
    left = max(0, job.steps_total - job.steps_done) if job.steps_total else None
    saved = None if per_step is None or left is None else per_step * left
    if saved is None:
        projection = "no projection: the run has no configured step count" if left is None else \
            "no projection: no cost measured between those steps yet"
    else:
        # A step of a tiny run costs under a micro-dollar: then say what a thousand of them cost.
        rate = (f"{usd_text(per_step)} per step" if per_step >= SMALL_STEP_USD else
                f"{usd_text(per_step * 1000)} per 1,000 steps")
        projection = (f"projected from this run's own curve: the {left} steps left of {job.steps_total} at "
                      f"{rate}, its cost per step from step {a} to {b}")
    return {"usd_per_step": exact_usd(per_step), "steps_left": left, "saved_usd": exact_usd(saved),
            "projection": projection, "steps_done": job.steps_done}

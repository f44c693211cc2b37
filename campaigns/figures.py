"""What a campaign bought: the one place its figures are computed (the page, the API, the CSV ask here).

Dollars come from costs.intelligence.jobs_money (each run's cost, unrounded to
the micro-dollar); ratios from costs.intelligence.ipd; scores from the
campaign's retention evals (campaigns.models.RetentionEval). For run i:

    own gain   = retention on the run's env after it − the same before it (the
                 previous evals: the last run's that has them, else the start)
    net gain   = Σ over the campaign's envs of (after − before)
    marginal IPD = own gain ÷ run dollars;  net IPD = net gain ÷ run dollars

so the runs' net gains add up to the campaign's (latest − start, summed over
envs), and the runs' dollars to the campaign's dollars. An external run has no
retention evals (its policy is not Yardstick's to load): its own gain is its
own score's gain, its net gain unknown.

The projection of the dollars to the next N points on the current environment
is a fit, labelled as one: gain = slope × dollars, least squares through the
origin, over the eval points of the last PROJECTION_RUNS runs on that env
(each run's own eval curve from costs.intelligence.score_cost_curve, gain over
its baseline against dollars spent in the run). Dollars = N ÷ slope; the 95 %
interval is N ÷ (slope ± 1.96 standard errors of the slope).
"""

import math
from decimal import Decimal

from costs import tokens
from costs.intelligence import FLAGS, charged_usd, ipd, jobs_money, score_cost_curve
from costs.money import exact_usd, ipd_text, usd_text, usd_texts
from trainer.kinds import kind_of
from trainer.models import ENDED

PROJECTION_RUNS = 3
PROJECTION_POINTS_DEFAULT = 5
Z95 = 1.96
FIT_NAME = "linear fit through the origin of eval gain on dollars (least squares)"


def _delta(after, before, env):
    if after is None or before is None or env not in after or env not in before:
        return None
    return after[env] - before[env]


def _ratio(value):
    return None if value is None else round(float(value), 6)


def summary(campaign, points=PROJECTION_POINTS_DEFAULT):
    """Every figure the campaign page shows, as plain values (money as exact strings, Decimal-free)."""
    jobs = list(campaign.jobs())
    evaluations = campaign.eval_jobs()
    money = jobs_money([j.pk for j in jobs] + [e.pk for v in evaluations.values() for e in v])
    facts = tokens.job_facts([j.pk for j in jobs])
    evals = {}
    for e in campaign.retention_evals.all():
        evals.setdefault(e.after_job_id, {})[e.env] = e.pass1
    start = evals.get(None)
    before = start
    total = Decimal(0)
    runs = []
    for n, job in enumerate(jobs, 1):
        # A run's dollars include those of the evaluation jobs that scored it (a campaign of launched runs), run 1's
        # those that scored the start it is measured against: the campaign's dollars stay its runs'.
        scorers = evaluations.get(job.pk, []) + (evaluations.get(None, []) if n == 1 else [])
        eval_usd = sum((charged_usd(money[e.pk]) for e in scorers), Decimal(0))
        usd = charged_usd(money[job.pk]) + eval_usd
        # A run nothing measured (a cluster node with no agent) says so, as on its own page, unless its scorers cost.
        unmeasured = money[job.pk]["cost_usd"] is None and not eval_usd
        start_usd = total
        total += usd
        after = evals.get(job.pk)
        # A run whose policy Yardstick does not hold has no retention evals (unless the campaign's evaluation
        # recipes score it): its own score's gain instead.
        evaluated = kind_of(job).holds_policy or (campaign.launches and bool(campaign.eval_recipes))
        own = _delta(after, before, job.env) if evaluated else money[job.pk]["gain_points"]
        net = None
        if after is not None and before is not None and all(e in after and e in before for e in campaign.envs):
            net = sum(after[e] - before[e] for e in campaign.envs)
        marginal, usd_per_point, state = ipd(own, usd)
        net_ipd, _, net_state = ipd(net, usd)
        runs.append({
            "n": n, "job_id": job.pk, "name": job.name, "env": job.env, "status": job.status, "source": job.source,
            "init_from": job.init_from_id, "init_step": job.init_step,
            "cost_usd": exact_usd(usd), "cost_display": money[job.pk]["cost_display"] if unmeasured else usd_text(usd),
            "eval_usd": exact_usd(eval_usd),
            "eval_jobs": [e.pk for e in scorers],
            "start_usd": exact_usd(start_usd), "cumulative_usd": exact_usd(total),
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
            "before": before, "after": after,
            "own_gain_points": own, "own_gain_from": "retention evals" if evaluated else "its own eval score",
            "net_gain_points": net,
            "marginal_ipd": _ratio(marginal), "marginal_ipd_display": ipd_text(marginal), "marginal_state": state,
            "usd_per_point": exact_usd(usd_per_point), "usd_per_point_display": usd_text(usd_per_point),
            "net_ipd": _ratio(net_ipd), "net_ipd_display": ipd_text(net_ipd), "net_state": net_state,
            **_price_of_a_point(usd, own, facts[job.pk]),
        })
        if after is not None:
            before = after
    measured = [r["net_gain_points"] for r in runs if r["net_gain_points"] is not None]
    net_total = sum(measured) if measured else None
    total_ipd, total_usd_per_point, total_state = ipd(net_total, total)
    latest = before
    over_time = _cost_per_point_over_time(runs)
    budget = campaign.budget_usd
    left = None if budget is None else budget - total
    # Spent, Budget and left side by side on the page: one precision (costs.money.usd_texts).
    spent_text, budget_text, left_text = usd_texts(total, budget, left) if budget is not None else (
        usd_text(total), usd_text(None), usd_text(None))
    return {
        "campaign": campaign.pk,
        "envs": campaign.envs,
        "start": start,
        "start_unscored": campaign.start_unscored(),
        "start_scorers": [e.pk for e in evaluations.get(None, [])],
        "latest": latest,
        "runs": runs,
        "cost_usd": exact_usd(total), "cost_display": spent_text,
        # What its dollars rest on (costs.intelligence.FLAGS), said beside them
        **{flag: any(m.get(flag) for m in money.values()) for flag in FLAGS},
        "net_gain_points": net_total,
        "net_ipd": _ratio(total_ipd), "net_ipd_display": ipd_text(total_ipd), "net_state": total_state,
        "usd_per_net_point": exact_usd(total_usd_per_point), "usd_per_net_point_display": usd_text(total_usd_per_point),
        "budget_usd": exact_usd(budget), "budget_display": budget_text,
        "budget_left_usd": exact_usd(left), "budget_left_display": left_text,
        "budget_used_fraction": (float(total / budget) if budget else None),
        "cost_per_point_over_time": over_time,
        "projection": projection(campaign, jobs, points, latest),
    }


def _price_of_a_point(usd, own, f):
    """A run's $ / own point decomposed (costs.tokens, over the run's dollars, eval jobs' included): its dollars
    per 1M rollout tokens x its 1M rollout tokens per own point, and the share of its job's dollars that went to
    generation."""
    mtok = Decimal(f.gen_tokens) / 1_000_000 if f.gen_tokens else None
    per_mtok = usd / mtok if mtok and usd > 0 else None
    mtok_per_point = mtok / Decimal(repr(float(own))) if mtok and own is not None and own > 0 else None
    split = tokens.shares(f)
    return {"rollout_tokens": f.gen_tokens, "usd_per_million_tokens": exact_usd(per_mtok),
            "usd_per_million_tokens_display": usd_text(per_mtok),
            "million_tokens_per_point": None if mtok_per_point is None else float(mtok_per_point),
            "million_tokens_per_point_display": "—" if mtok_per_point is None else f"{float(mtok_per_point):.3g}",
            "generation_share": None if split is None else float(split["generation"]),
            "generation_share_display": "" if split is None else f"{split['generation'] * 100:.1f} %"}


def _cost_per_point_over_time(runs):
    """[{n, at, cumulative_usd, cumulative_net_gain, usd_per_net_point}] after each run: the campaign's dollars
    so far ÷ its net points so far (None unless that gain is positive)."""
    out, gain = [], 0.0
    for r in runs:
        if r["net_gain_points"] is not None:
            gain += r["net_gain_points"]
        cum = Decimal(r["cumulative_usd"])
        _, per_point, _ = ipd(gain, cum)
        out.append({"n": r["n"], "at": r["finished_at"], "cumulative_usd": r["cumulative_usd"],
                    "cumulative_net_gain": gain, "usd_per_net_point": exact_usd(per_point),
                    "usd_per_net_point_display": usd_text(per_point),
                    "run_usd_per_point": r["usd_per_point"]})
    return out


def projection(campaign, jobs, points, latest):
    """Dollars to the next `points` points on the current env (the running run's; else the loop's next; else
    the latest run's), fitted to the recent runs' curves on it; a dict with the fit named, or a `state` saying
    why there is none."""
    if jobs and (jobs[-1].status not in ENDED or campaign.loop != "running"):
        env = jobs[-1].env
    else:
        env = campaign.next_env()
    recent = [j for j in jobs if j.env == env and kind_of(j).holds_policy][-PROJECTION_RUNS:]
    xs, ys = [], []
    for job in recent:
        curve = score_cost_curve(job)
        if not curve:
            continue
        base = curve[0]["pass1"]
        for p in curve[1:]:
            xs.append(p["cost_usd"])
            ys.append(p["pass1"] - base)
    out = {"env": env, "points": points, "fit": FIT_NAME, "runs": [j.pk for j in recent], "n_points": len(xs),
           "label": "projection", "from_pass1": (latest or {}).get(env)}
    sxx = sum(x * x for x in xs)
    if len(xs) < 2 or sxx <= 0:
        return {**out, "state": f"no projection yet: fewer than 2 eval points with a cost on {env}"}
    slope = sum(x * y for x, y in zip(xs, ys)) / sxx  # points per dollar
    resid = sum((y - slope * x) ** 2 for x, y in zip(xs, ys))
    se = math.sqrt(resid / (len(xs) - 1) / sxx)
    out.update({"slope_points_per_usd": slope, "slope_se": se})
    if slope <= 0:
        return {**out, "state": f"no projection: the recent runs on {env} did not gain for their dollars"}
    usd = points / slope
    high_slope, low_slope = slope + Z95 * se, slope - Z95 * se
    return {**out, "state": "ok", "usd": exact_usd(Decimal(repr(usd))), "usd_display": usd_text(Decimal(repr(usd))),
            "usd_low": exact_usd(Decimal(repr(points / high_slope))),
            "usd_low_display": usd_text(Decimal(repr(points / high_slope))),
            "usd_high": exact_usd(Decimal(repr(points / low_slope))) if low_slope > 0 else None,
            "usd_high_display": usd_text(Decimal(repr(points / low_slope))) if low_slope > 0 else "unbounded"}

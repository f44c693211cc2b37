"""What a sweep bought, as its page, /api/sweeps/<id>, its CSV and the cost review read it (docs/figures.md,
"Sweeps"): each trial's dollars, score and points per dollar from the cost figures (costs.intelligence, unrounded),
the sweep's dollars as their sum, the front, the best trial for each objective, and Optuna's parameter importance.
"""

from decimal import Decimal

from costs.intelligence import FLAGS, charged_usd, jobs_money
from costs.ledger import usage
from costs.money import exact_usd, ipd_text, usd_text, usd_texts
from sweeps import search
from sweeps.models import SweepTrial


def summary(sweep, figs=None):
    figs = sweep.figures() if figs is None else figs
    setup = _setup(sweep)
    spent = sum((f.usd for f in figs), Decimal(0)) + (setup["usd"] if setup else Decimal(0))
    rows = [_row(f) for f in figs]
    scored = [i for i, f in enumerate(figs) if f.told_state == "ended" and f.score is not None
              and f.money.get("cost_usd") is not None]
    on_front = {scored[i] for i in search.front([(figs[j].score, figs[j].usd) for j in scored])}
    for i, row in enumerate(rows):
        row["on_front"] = i in on_front
    front = sorted((rows[i] for i in on_front), key=lambda r: Decimal(r["cost_usd"]))
    ended = [rows[i] for i in scored]
    best = {
        "score": max(ended, key=lambda r: (r["score"], -Decimal(r["cost_usd"])), default=None),
        "per_dollar": max((r for r in ended if r["points_per_usd"] is not None),
                          key=lambda r: r["points_per_usd"], default=None),
        "cheapest": (min((r for r in ended if r["score"] >= sweep.target_score), key=lambda r: Decimal(r["cost_usd"]),
                         default=None) if sweep.target_score is not None else None),
    }
    left = sweep.budget_usd - spent
    shown = usd_texts(spent, sweep.budget_usd, left)  # side by side on the page: one precision
    return {
        "id": sweep.pk, "state": sweep.state, "why": sweep.why, "reason": sweep.reason,
        "objective": sweep.objective, "objective_text": search.OBJECTIVES[sweep.objective],
        "target_score": sweep.target_score,
        "space": sweep.space,  # [Dimension.to_dict()]: the study charts' axes (log, choices)
        "spent_usd": exact_usd(spent), "spent_display": shown[0],
        "budget_usd": exact_usd(sweep.budget_usd), "budget_display": shown[1],
        "left_usd": exact_usd(left), "left_display": shown[2],
        "budget_used_fraction": float(min(Decimal(1), spent / sweep.budget_usd)) if sweep.budget_usd else None,
        "setup": {k: v for k, v in setup.items() if k != "usd"} if setup else None,
        "trials": rows, "started": len(rows), "active": sum(1 for f in figs if f.active),
        "stopped_by_sweep": sum(1 for f in figs if f.stopped_by_sweep),
        # What its dollars rest on (costs.intelligence.FLAGS), said beside them
        **{flag: any(f.money.get(flag) for f in figs) for flag in FLAGS},
        "front": [r["number"] for r in front],
        "best": {k: (None if v is None else v["number"]) for k, v in best.items()},
        "importance": search.importance(sweep.dimensions, sweep.objective, [f.told for f in figs],
                                        sweep.target_score),
        "repeats": (groups := repeats(figs)),
        "repeats_note": _overlap(groups),
        "space_changes": [{**c, "space_display": _space_text(c["space"])} for c in sweep.space_changes],
        "space_display": _space_text(sweep.space),
        "outside_space": [f.trial.number for f in figs if not search.inside(sweep.dimensions, f.trial.params)],
        "pending": len(sweep.pending),
    }


def repeats(figs):
    """Each trial run again over other seeds (Re-run the top K), with its repeats: the spread of their scores and
    points per dollar over the seeds that ended with a result (mean, lowest, highest, sample standard deviation), so
    a difference between two trials can be read against the noise of one. Best mean points per dollar first."""
    by_number = {f.trial.number: f for f in figs}
    members = {}
    for f in figs:
        if f.trial.repeat_of_id is not None:
            members.setdefault(f.trial.repeat_of.number, []).append(f)
    out = []
    for number, rest in members.items():
        first = by_number.get(number)
        runs = ([first] if first is not None else []) + rest
        done = [f for f in runs if f.told_state == "ended" and f.score is not None and f.money.get("cost_usd")
                is not None]
        ppd = [f.ppd for f in done if f.ppd is not None]
        out.append({"number": number, "trials": [f.trial.number for f in runs],
                    "seeds": [f.trial.seed for f in runs],
                    "ended": len(done), "score": _spread([f.score for f in done]), "points_per_usd": _spread(ppd)})
    return sorted(out, key=lambda g: -(g["points_per_usd"]["mean"] if g["points_per_usd"] else float("-inf")))


def _spread(values):
    if not values:
        return None
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else None
    return {"mean": mean, "low": min(values), "high": max(values), "sd": sd, "n": len(values)}


def _overlap(groups):
    """A sentence when the two best groups' points per dollar overlap over their seeds: which is better is then
    within the noise of these runs."""
    ranked = [g for g in groups if g["points_per_usd"] and g["points_per_usd"]["n"] > 1]
    if len(ranked) < 2:
        return ""
    a, b = ranked[0], ranked[1]
    if a["points_per_usd"]["low"] <= b["points_per_usd"]["high"]:
        return (f"trials {a['number']} and {b['number']}: their points per dollar overlap over their seeds "
                f"({a['points_per_usd']['n']} and {b['points_per_usd']['n']} runs): which is better is within the "
                "noise of these runs")
    return ""


def _space_text(space):
    parts = []
    for d in space:
        if "choices" in d:
            parts.append(f"{d['name']} in {', '.join(str(c) for c in d['choices'])}")
        else:
            parts.append(f"{d['name']} {d['low']:.4g} to {d['high']:.4g}{' (log)' if d['log'] else ''}")
    return "; ".join(parts)


def spent(sweeps):
    """{sweep id: (Decimal dollars charged to its trials and its setup, trials started)} of many sweeps at once, for
    the lists (the Sweeps page, GET /api/sweeps): one read of their jobs' money, none of their curves or importance."""
    pairs = list(SweepTrial.objects.filter(sweep__in=sweeps).values_list("sweep_id", "job_id"))
    setups = [(s.pk, s.setup_job_id) for s in sweeps if s.setup_job_id is not None]
    ids = [job_id for _, job_id in pairs + setups]
    money = jobs_money(ids) if ids else {}
    out = {s.pk: (Decimal(0), 0) for s in sweeps}
    for sweep_id, job_id in pairs:
        usd, n = out[sweep_id]
        out[sweep_id] = (usd + charged_usd(money[job_id]), n + 1)
    for sweep_id, job_id in setups:
        usd, n = out[sweep_id]
        out[sweep_id] = (usd + charged_usd(money[job_id]), n)
    return out


def _setup(sweep):
    """The sweep's shared setup job as the page, the API and the CSV show it, with `usd` (Decimal); None without."""
    job = sweep.setup_job
    if job is None:
        return None
    money = jobs_money([job.pk])[job.pk]
    usd = charged_usd(money)
    return {"job_id": job.pk, "recipe": job.launch.recipe_name, "status": job.status, "usd": usd,
            "cost_usd": money["cost_usd"] if money.get("cost_usd") is not None else None,
            "cost_display": money.get("cost_display", usd_text(usd)), "cost_title": money.get("cost_title", "")}


def _row(f):
    job, money = f.trial.job, f.money
    return {
        "number": f.trial.number, "job_id": job.pk, "name": job.name, "status": job.status,
        "params": f.trial.params, "params_display": {k: _value_text(v) for k, v in f.trial.params.items()},
        "stopped_by_sweep": f.stopped_by_sweep,
        "interrupted": f.interrupted,
        "repeat_of": f.trial.repeat_of.number if f.trial.repeat_of_id is not None else None, "seed": f.trial.seed,
        "stop_reason": f.stopped_by_sweep or _interruption(f) or _why_ended(job),
        "settling": f.settling,
        "cost_usd": money["cost_usd"] if money else exact_usd(f.usd),
        "cost_display": money.get("cost_display", usd_text(f.usd)), "cost_title": money.get("cost_title", ""),
        "score": f.score, "gain_points": f.gain,
        "points_per_usd": money.get("points_per_usd"),
        "ipd_display": money.get("ipd_display") or ipd_text(None),
        "curve": [{"usd": float(p.usd), "score": p.score} for p in f.curve],
    }


def _value_text(value):
    """A parameter's value as the trials table writes it: a float to 4 significant digits (exact on hover)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cost_review(period):
    """The cost review's Sweeps card: each sweep that spent in the period, its spend there (the sum of its trials'
    attributed dollars, unrounded) with its trials underneath; None when no sweep spent in it."""
    trials = list(SweepTrial.objects.select_related("sweep", "job").order_by("sweep_id", "number"))
    if not trials:
        return None
    spent = {}
    for u in usage(period.start, period.end, job_ids=[t.job_id for t in trials]):
        spent[u.job_id] = spent.get(u.job_id, Decimal(0)) + u.total_usd
    rows = {}
    for t in trials:
        if t.job_id not in spent:
            continue
        row = rows.setdefault(t.sweep_id, {"sweep": t.sweep, "usd": Decimal(0), "trials": []})
        row["usd"] += spent[t.job_id]
        row["trials"].append({"number": t.number, "job": t.job, "usd": spent[t.job_id],
                              "stopped_by_sweep": t.stopped_reason if t.job.status != "completed" else ""})
    if not rows:
        return None
    return {"sweeps": sorted(rows.values(), key=lambda r: (r["sweep"].team, -r["usd"]))}


def _why_ended(job):
    """Why a trial that did not complete ended: its stop's reason, its error, or who stopped it (the reason of its
    last status change); "" for one that completed or runs."""
    if job.status in ("completed", "queued", "running"):
        return ""
    if job.stop_reason or job.error:
        return job.stop_reason or job.error
    change = job.status_changes.order_by("-at", "-id").values_list("reason", flat=True).first()
    return change or job.status


def _interruption(f):
    """Why an interrupted trial is not a result, and what became of it."""
    if not f.interrupted:
        return ""
    job = f.trial.job
    if f.run_again:
        then = f"; its parameters run again as trial {f.trial.run_again_as.number}"
    elif f.to_resume:
        then = "; the sweep resumes it"
    else:
        then = "; the sweep had stopped starting trials"
    return f"interrupted: {job.interrupted_by}{then}"

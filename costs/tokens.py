"""Cost per token inside intelligence per dollar: where a point's price goes, and what hardware buys it cheapest.

A job's dollars per point multiplies out as

    $ / point = ($ / 1M rollout tokens) x (1M rollout tokens / point)

the price of the forward pass that generated the rollouts, times the sample efficiency of the run. Its dollars
split by phase from its steps' timings (`timing/generate_s`, `timing/train_s`, `timing/eval_s`, `timing/step_s`;
veRL's and NeMo RL's are mapped onto them by tracking.ingest): each phase's share of the job's held time (the
wall seconds in which it held at least one device, its stints overlapping counted once) is its share of the
job's dollars. Within a step whose phases add up to more than the step (an asynchronous trainer overlapping
generation and training), the phases are scaled down to the step. What the steps do not cover of the held time
is waiting (loading, queueing on the device, idle between steps). A run that logs no generation time (TRL) has
no split: it says so rather than guess.

`hardware` puts the fleet's runs side by side per environment and device model; `what_if` re-prices a job on
another device model, an estimate always labelled so, with the figures it came from. Definitions:
docs/figures.md, "Cost per token".
"""

import fnmatch
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from collector.models import Device
from costs.intelligence import Scores, not_measured, unmeasured
from costs.ledger import usage
from costs.money import MICRO, exact_usd, ipd_text, usd_text, usd_title
from costs.prices import PriceBook, burn_usd_per_h, cost_usd
from trainer.models import Job, Step, Stint
from yardstick.inputs import InputError

PHASES = ("generation", "training", "evaluation", "other", "waiting")
PHASE_LABELS = {"generation": "generation (rollouts)", "training": "training (updates)",
                "evaluation": "evaluation", "other": "rest of the steps (scoring, checkpoints)",
                "waiting": "waiting (outside steps: loading, a base-policy build, idle)"}
NO_SPLIT = "no time per phase logged (generation, training): the run's dollars are not split"
ESTIMATE = "estimate"
MIXED = "mixed"  # a job charged on more than one device model

# Rated board power, watts, from NVIDIA's data sheets: the what-if's energy for a model whose power the fleet
# never measured on the environment (labelled "rated"). Matched like the price book: first pattern that fits.
RATED_POWER_W = (
    ("*rubin*", 1800), ("*gb300*", 1400), ("*b300*", 1100), ("*gb200*", 1200), ("*b200*", 1000),
    ("*h200*", 700), ("*h100*pcie*", 350), ("*h100*", 700), ("*a100*pcie*", 300), ("*a100*", 400),
    ("*l40s*", 350),
)

_STEPS = """
SELECT job_id,
       sum(gen_tokens) FILTER (WHERE step > 0),
       sum(train_tokens) FILTER (WHERE step > 0),
       count(*) FILTER (WHERE timed),
       sum(g * f), sum(t * f), sum(e * f), sum(s), count(*)
FROM (SELECT job_id, step, gen_tokens, g, t, e, s, timed, train_tokens,
             CASE WHEN s > 0 AND g + t + e > s THEN s / (g + t + e) ELSE 1 END AS f
      FROM (SELECT job_id, step, gen_tokens,
                   {g} AS g, {t} AS t, {e} AS e, greatest(coalesce(step_s, 0), 0) AS s,
                   jsonb_typeof(metrics->'timing/generate_s') = 'number' AS timed,
                   CASE WHEN jsonb_typeof(metrics->'performance/train_tokens') = 'number'
                        THEN (metrics->>'performance/train_tokens')::float8 END AS train_tokens
            FROM {steps} WHERE job_id = ANY(%s)) x) y
GROUP BY job_id
""".format(steps=Step._meta.db_table, **{k: f"CASE WHEN jsonb_typeof(metrics->'{key}') = 'number' "
                 f"THEN greatest((metrics->>'{key}')::float8, 0) ELSE 0 END"
              for k, key in (("g", "timing/generate_s"), ("t", "timing/train_s"), ("e", "timing/eval_s"))})


def _dec(x):
    return Decimal(repr(float(x)))


def held_seconds(intervals):
    """Wall seconds covered by [(start, end)], overlapping ones counted once."""
    total, end_so_far = 0.0, None
    for start, end in sorted(intervals):
        if end_so_far is not None and start < end_so_far:
            start = end_so_far
        if end > start:
            total += (end - start).total_seconds()
            end_so_far = end
        elif end_so_far is None or end > end_so_far:
            end_so_far = end
    return total


@dataclass
class Facts:
    """What one job's decomposition is computed from, unrounded."""

    job_id: int
    cost: Decimal = Decimal(0)
    device_s: Decimal = Decimal(0)
    energy_j: Decimal = Decimal(0)
    by_model: dict = field(default_factory=dict)  # model -> {"device_s", "energy_j", "usd", "prices"}
    gen_tokens: int = 0
    train_tokens: float = 0.0
    timed_steps: int = 0
    steps: int = 0
    phase_s: dict = field(default_factory=dict)  # generation, training, evaluation, steps (all of them)
    held_s: float = 0.0
    gain: float | None = None
    simulated: bool = False
    example_prices: bool = False
    unmeasured: str = ""  # why it ran where no agent measures (costs.intelligence.unmeasured); "" when it did not

    @property
    def model(self):
        """The device model the job ran on; MIXED for more than one."""
        models = [m for m, v in self.by_model.items() if v["device_s"] > 0]
        return models[0] if len(models) == 1 else (MIXED if models else None)


def job_facts(job_ids, book=None, scores=None, rows=None):
    """{job id: Facts} of `job_ids`: their usage (every device-minute charged to them; `rows` where the caller has
    read it already), steps and stints."""
    book = book or PriceBook()
    job_ids = list(job_ids)
    facts = {j: Facts(j) for j in job_ids}
    for u in usage(job_ids=job_ids, book=book) if rows is None else rows:
        f = facts[u.job_id]
        f.cost += u.total_usd
        f.device_s += u.device_s
        f.energy_j += u.energy_j
        m = f.by_model.setdefault(u.model, {"device_s": Decimal(0), "energy_j": Decimal(0), "usd": Decimal(0),
                                            "prices": set()})
        m["device_s"] += u.device_s
        m["energy_j"] += u.energy_j
        m["usd"] += u.total_usd
        if u.price_pattern is not None:
            m["prices"].add(_price_text(_entry_in_force(book, u.price_pattern, u.day)))
        f.simulated |= u.simulated
        f.example_prices |= u.example_price
    with connection.cursor() as cur:
        cur.execute(_STEPS, [job_ids])
        for job_id, gen, train, timed, g, t, e, s, steps in cur.fetchall():
            f = facts[job_id]
            f.gen_tokens, f.train_tokens, f.timed_steps, f.steps = int(gen or 0), float(train or 0), timed, steps
            f.phase_s = {"generation": g or 0.0, "training": t or 0.0, "evaluation": e or 0.0, "steps": s or 0.0}
    now = timezone.now()
    spans = defaultdict(list)
    for job_id, start, end in Stint.objects.filter(job_id__in=job_ids).values_list("job_id", "started_at", "ended_at"):
        spans[job_id].append((start, end or now))
    for job_id, intervals in spans.items():
        facts[job_id].held_s = held_seconds(intervals)
    scores = scores or Scores(job_ids)
    blind = unmeasured(job_ids)
    for job_id, f in facts.items():
        latest = scores.latest(job_id)
        f.gain = None if latest is None else latest - scores.baseline(job_id)
        f.unmeasured = blind.get(job_id, "")
    return facts


def _entry_in_force(book, pattern, day):
    """The Price of `pattern` in force on `day` (the one a Usage row was priced by)."""
    in_force = [p for p in book.by_pattern.get(pattern, []) if p.effective_from <= day]
    return in_force[-1] if in_force else None


def _plain(amount):
    """A Decimal as written by hand: 7.2 not 7.200000, 0.1 not 1E-1."""
    return format(amount.normalize(), "f")


def _cents(amount):
    """Dollars with at least the cents: 0.10, 0.125."""
    text = _plain(amount)
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def _price_text(price):
    """How a price entry reads on the pages: `*H100*: $3.60/h, $0.10/kWh, PUE 1.5 (from 2020-01-01)`."""
    if price is None:
        return ""
    example = ", an example price" if price.is_example else ""
    return (f"{price.pattern}: ${price.usd_per_hour:.2f}/h, ${_cents(price.usd_per_kwh)}/kWh, PUE {_plain(price.pue)} "
            f"(from {price.effective_from}{example})")


def _per_million(usd, tokens):
    return usd / (Decimal(tokens) / 1_000_000) if tokens and usd is not None else None


def shares(f):
    """{phase: Decimal share of the job's held time} of PHASES (adding up to 1), or None without a split (its steps
    logged no generation time). A job that held devices and logged no step at all (stopped while loading, or while
    building its base policy) spent all of it outside steps: waiting."""
    if not f.steps and f.held_s > 0:
        return {**{p: Decimal(0) for p in PHASES}, "waiting": Decimal(1)}
    if not f.timed_steps:
        return None
    inside = {p: _dec(f.phase_s.get(p, 0.0)) for p in ("generation", "training", "evaluation")}
    steps_s = _dec(f.phase_s.get("steps", 0.0))
    inside["other"] = max(Decimal(0), steps_s - sum(inside.values()))
    held = max(_dec(f.held_s), steps_s, sum(inside.values()))
    if held <= 0:
        return None
    out = {p: s / held for p, s in inside.items()}
    out["waiting"] = 1 - sum(out.values())
    return out


def phase_dollars(f):
    """{phase: Decimal dollars} of PHASES, or None without a split; each phase to the micro-dollar, waiting what
    is left, so they add up to the job's cost (to the micro-dollar) exactly."""
    split = shares(f) if f.cost > 0 else None
    if split is None:
        return None
    out = {p: (f.cost * split[p]).quantize(MICRO) for p in PHASES if p != "waiting"}
    out["waiting"] = f.cost.quantize(MICRO) - sum(out.values())
    return out


def phase_shares(job_ids, book=None):
    """{job id: its `shares`, or None} of `job_ids` (the cost review splits each job's dollars in a period by
    them)."""
    # Shares are of held time (steps and stints): the jobs' usage is not read for them.
    return {job_id: shares(f) for job_id, f in job_facts(job_ids, book, rows=()).items()}


def decomposition(f):
    """A job's cost per token and dollars per point, decomposed (exact strings to the micro-dollar or floats,
    beside the display strings the pages show)."""
    phases = phase_dollars(f)
    tokens = f.gen_tokens
    inside = sum(f.phase_s.get(p, 0.0) for p in ("generation", "training", "evaluation"))
    steps_s = max(f.phase_s.get("steps", 0.0), inside)
    seconds = {"generation": f.phase_s.get("generation", 0.0), "training": f.phase_s.get("training", 0.0),
               "evaluation": f.phase_s.get("evaluation", 0.0), "other": steps_s - inside,
               "waiting": max(0.0, f.held_s - steps_s)}
    mtok = Decimal(tokens) / 1_000_000 if tokens else None
    all_in = _per_million(f.cost, tokens) if f.cost > 0 else None
    gain = f.gain
    mtok_per_point = (mtok / _dec(gain)) if mtok and gain is not None and gain > 0 else None
    usd_per_point = f.cost / _dec(gain) if gain is not None and gain > 0 and f.cost > 0 else None
    gen_usd = phases["generation"] if phases else None
    train_usd = phases["training"] if phases else None
    gen_per_m = _per_million(gen_usd, tokens) if gen_usd is not None else None
    train_per_m = _per_million(train_usd, f.train_tokens) if train_usd is not None and f.train_tokens else None
    out = {
        "cost_usd": exact_usd(f.cost),
        "rollout_tokens": tokens,
        "trained_tokens": round(f.train_tokens),
        "usd_per_million_tokens": exact_usd(all_in),
        "million_tokens_per_point": None if mtok_per_point is None else float(mtok_per_point),
        "usd_per_point": exact_usd(usd_per_point),
        "gain_points": gain,
        "generation_usd_per_million_tokens": exact_usd(gen_per_m),
        "training_usd_per_million_trained_tokens": exact_usd(train_per_m),
        "split": phases is not None,
        "split_note": "" if phases is not None else NO_SPLIT,
        "held_s": f.held_s,
        "phase_seconds": {p: f.phase_s.get(p, 0.0) for p in ("generation", "training", "evaluation", "steps")},
        "phases": [] if phases is None else [
            {"phase": p, "label": PHASE_LABELS[p], "seconds": seconds[p], "usd": exact_usd(phases[p]),
             "usd_display": usd_text(phases[p]), "share": float(phases[p] / f.cost),
             "share_display": f"{phases[p] / f.cost * 100:.1f} %"} for p in PHASES],
        "device_model": f.model,
        "simulated": f.simulated,
        "example_prices": f.example_prices,
    }
    out.update({
        # The exact amounts on hover where the displays round (the product checks by hand with them).
        **{f"{k}_title": usd_title(v) for k, v in (("usd_per_million_tokens", all_in), ("usd_per_point", usd_per_point),
                                                    ("generation_usd_per_million_tokens", gen_per_m),
                                                    ("training_usd_per_million_trained_tokens", train_per_m))},
        "cost_display": usd_text(f.cost), "cost_title": usd_title(f.cost),
        "usd_per_million_tokens_display": usd_text(all_in),
        "million_tokens_per_point_display": ratio_text(mtok_per_point),
        "usd_per_point_display": usd_text(usd_per_point),
        "generation_usd_per_million_tokens_display": usd_text(gen_per_m),
        "training_usd_per_million_trained_tokens_display": usd_text(train_per_m),
        "state": _state(f, tokens, gain),
    })
    out.update(not_measured(f.cost, f.unmeasured))  # no figure, never $0.00, as the job's cost says it
    return out


def _state(f, tokens, gain):
    if f.cost <= 0:
        return "no cost yet"
    if not tokens:
        return "no rollout tokens logged"
    if gain is None:
        return "no eval yet"
    if gain <= 0:
        return "no gain yet"
    return "ok"


def ratio_text(value, digits=3):
    """A ratio for display: three significant figures, separators from 1,000 up."""
    if value is None:
        return "—"
    value = float(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def job_decomposition(job, book=None):
    """The decomposition of one job (the job page, its live event and `/api/jobs/<id>`)."""
    return decomposition(job_facts([job.pk], book)[job.pk])


# -- the hardware page -----------------------------------------------------------------------------------


@dataclass
class Filters:
    start: datetime | None = None
    end: datetime | None = None
    team: str = ""


def _spread(values):
    values = [v for v in values if v is not None]
    return (min(values), max(values)) if values else None


def hardware(filters=None, book=None, env=None):
    """Rows per (environment, device model) of the jobs created in the period (and of the team), from their
    whole usage: [{env, model, runs, device_hours, tokens_per_device_s, tokens_per_joule, generation $/1M,
    all-in $/1M, 1M tokens per point, $ per point, IPD, each with the runs it is from and their spread,
    prices, rank}], by environment then $ per point. A model with fewer than two runs on its environment shows
    its figures unranked (rank None). `env`: that environment's rows only."""
    filters = filters or Filters()
    jobs = Job.objects.all() if env is None else Job.objects.filter(env=env)
    if filters.start is not None:
        jobs = jobs.filter(created_at__gte=filters.start)
    if filters.end is not None:
        jobs = jobs.filter(created_at__lt=filters.end)
    if filters.team:
        jobs = jobs.filter(team=filters.team)
    env_of = dict(jobs.values_list("pk", "env"))
    facts = job_facts(env_of, book)
    groups = defaultdict(list)
    for job_id, f in facts.items():
        if f.cost > 0 and f.model not in (None, MIXED):  # a job on two models is no row's (docs/figures.md)
            groups[(env_of[job_id] or "—", f.model)].append(f)
    rows = [_hardware_row(env, model, fs) for (env, model), fs in groups.items()]
    by_env = defaultdict(list)
    for r in rows:
        by_env[r["env"]].append(r)
    for env_rows in by_env.values():
        ranked = sorted((r for r in env_rows if r["runs"] >= 2 and r["usd_per_point_value"] is not None),
                        key=lambda r: r["usd_per_point_value"])
        for i, r in enumerate(ranked, 1):
            r["rank"] = i
    return sorted(rows, key=lambda r: (r["env"], r["rank"] is None, r["rank"] or 0, r["model"]))


def _ratio(num, den):
    return num / den if den else None


def _hardware_row(env, model, fs):
    cost = sum((f.cost for f in fs), Decimal(0))
    device_s = sum((f.device_s for f in fs), Decimal(0))
    tokens = sum(f.gen_tokens for f in fs)
    split = [(f, phase_dollars(f)) for f in fs]
    split = [(f, p) for f, p in split if p is not None]
    gen_usd = sum((p["generation"] for _, p in split), Decimal(0))
    gen_tokens = sum(f.gen_tokens for f, _ in split)
    gained = [f for f in fs if f.gain is not None]
    gain = sum(f.gain for f in gained)
    gained_cost = sum((f.cost for f in gained), Decimal(0))
    gained_tokens = sum(f.gen_tokens for f in gained)
    per_point = gained_cost / _dec(gain) if gained and gain > 0 else None
    mtok_per_point = Decimal(gained_tokens) / 1_000_000 / _dec(gain) if gained and gain > 0 and gained_tokens else None
    ipd = _dec(gain) / gained_cost if gained and gained_cost > 0 else None

    def per_run(fn):
        return _spread([fn(f) for f in fs])

    # Rollout tokens per second or joule are of the runs that logged rollout tokens: a run that logs none (TRL) has
    # no such figure, which is not a figure of 0.
    counted = [f for f in fs if f.gen_tokens]
    counted_s = sum((f.device_s for f in counted), Decimal(0))
    counted_j = sum((f.energy_j for f in counted), Decimal(0))

    prices = sorted(set().union(*(f.by_model.get(model, {}).get("prices", set()) for f in fs)) - {""})
    return {
        "env": env, "model": model, "runs": len(fs),
        "device_hours": float(device_s / 3600),
        "token_runs": len(counted),
        "tokens_per_device_s": _float(_ratio(Decimal(tokens), counted_s)) if counted else None,
        "tokens_per_device_s_spread": _spread([_float(_ratio(Decimal(f.gen_tokens), f.device_s)) for f in counted]),
        "tokens_per_joule": _float(_ratio(Decimal(tokens), counted_j)) if counted else None,
        "tokens_per_joule_spread": _spread([_float(_ratio(Decimal(f.gen_tokens), f.energy_j)) for f in counted]),
        "generation_usd_per_million_tokens": exact_usd(_per_million(gen_usd, gen_tokens) if split else None),
        "generation_runs": len(split),
        "generation_spread": _spread([_float(_per_million(p["generation"], f.gen_tokens)) for f, p in split]),
        "usd_per_million_tokens": exact_usd(_per_million(cost, tokens)),
        "usd_per_million_tokens_spread": per_run(lambda f: _float(_per_million(f.cost, f.gen_tokens))),
        "million_tokens_per_point": _float(mtok_per_point),
        "usd_per_point": exact_usd(per_point),
        "usd_per_point_value": per_point,
        "usd_per_point_spread": _spread([_float(f.cost / _dec(f.gain)) for f in gained if f.gain > 0]),
        "points_per_usd": _float(ipd),
        "points_per_usd_spread": _spread([_float(_dec(f.gain) / f.cost) for f in gained]),
        "scored_runs": len(gained),
        "cost_usd": exact_usd(cost),
        "mean_power_w": _float(_ratio(sum((f.by_model[model]["energy_j"] for f in fs), Decimal(0)),
                                      sum((f.by_model[model]["device_s"] for f in fs), Decimal(0)))),
        "prices": prices,
        "rank": None,
        "simulated": any(f.simulated for f in fs),
        "example_prices": any(f.example_prices for f in fs),
        "displays": {"generation": usd_text(_per_million(gen_usd, gen_tokens) if split else None),
                     "all_in": usd_text(_per_million(cost, tokens)), "per_point": usd_text(per_point),
                     "ipd": ipd_text(ipd), "mtok_per_point": ratio_text(mtok_per_point)},
    }


def _float(value):
    return None if value is None else float(value)


HARDWARE_CSV = ("env", "model", "rank", "runs", "device_hours", "tokens_per_device_s", "tokens_per_joule",
                "generation_usd_per_million_tokens", "generation_runs", "usd_per_million_tokens",
                "million_tokens_per_point", "usd_per_point", "points_per_usd", "scored_runs", "cost_usd", "prices")


# -- what if it ran on another GPU ------------------------------------------------------------------------


def rated_power_w(model):
    """Watts from RATED_POWER_W for a model name, or None."""
    name = (model or "").lower()
    for pattern, watts in RATED_POWER_W:
        if fnmatch.fnmatchcase(name, pattern):
            return watts
    return None


def what_if(job, target_model, speedup=None, book=None, today=None):
    """The job re-priced on `target_model` (an estimate): {estimate, inputs, cost, IPD, ...} or {error}.

    Device time on the target = the job's device-seconds / speed-up, the speed-up typed (`speedup`) or
    measured: the target's rollout tokens per device-second over the job's model's, both from the fleet's runs
    on the job's environment (`hardware`). Cost = that time x the target's price per device-hour, plus that
    time x the target's mean power on the environment (its runs' energy over their device-seconds; else its
    rated power, said so) x the energy price x PUE, at the prices in force `today`."""
    book = book or PriceBook()
    today = today or timezone.now().date()
    f = job_facts([job.pk], book)[job.pk]
    if f.device_s <= 0:
        return {"error": "this job has no device time charged yet: nothing to re-price", "param": "job"}
    target_model = (target_model or "").strip()
    if not target_model:
        return {"error": "name the device model to re-price the job on", "param": "model"}
    price = book.price(target_model, today)
    if price is None:
        return {"error": f"no price in the price book for {target_model!r}: add one (manage.py prices add)",
                "param": "model"}
    env_rows = {r["model"]: r for r in hardware(book=book, env=job.env)}
    source = f.model
    if speedup is not None:
        if not isinstance(speedup, (int, float, Decimal)) or not speedup > 0:
            return {"error": f"speed-up must be a number above 0, got {speedup!r}", "param": "speedup"}
        ratio, how = _dec(speedup), f"a speed-up of {speedup:g}× typed by the user"
    else:
        mine, theirs = env_rows.get(source), env_rows.get(target_model)
        if not (mine and theirs and mine["tokens_per_device_s"] and theirs["tokens_per_device_s"]):
            return {"error": f"the fleet has no runs of both {source} and {target_model} on {job.env}: "
                             "type a speed-up instead", "param": "speedup"}
        ratio = _dec(theirs["tokens_per_device_s"]) / _dec(mine["tokens_per_device_s"])
        how = (f"measured on {job.env}: {theirs['tokens_per_device_s']:.4g} tokens per device-second on "
               f"{target_model} ({theirs['runs']} runs) over {mine['tokens_per_device_s']:.4g} on {source} "
               f"({mine['runs']} runs)")
    device_s = f.device_s / ratio
    measured = env_rows.get(target_model)
    if measured and measured["mean_power_w"]:
        power_w = _dec(measured["mean_power_w"])
        power_from = (f"measured: {measured['mean_power_w']:.4g} W, the mean power of {target_model} over its "
                      f"{measured['runs']} runs on {job.env}")
    else:
        rated = rated_power_w(target_model)
        if rated is None:
            return {"error": f"the fleet never measured {target_model}'s power on {job.env} and its rated power "
                             "is not known: type a model with a data-sheet power (docs/figures.md)", "param": "model"}
        power_w, power_from = _dec(rated), f"rated: {rated} W, {target_model}'s data sheet (not measured here)"
    device_usd, energy_usd = cost_usd(price, device_s, device_s * power_w)
    cost = device_usd + energy_usd
    gain = f.gain
    return {
        "estimate": True, "label": ESTIMATE,
        "job_id": job.pk, "from_model": source, "to_model": target_model,
        "speedup": float(ratio), "speedup_from": how,
        "device_s": float(f.device_s), "projected_device_s": float(device_s),
        "power_w": float(power_w), "power_from": power_from,
        "price": _price_text(price), "price_day": today.isoformat(),
        "cost_usd": exact_usd(f.cost), "projected_cost_usd": exact_usd(cost),
        "projected_device_usd": exact_usd(device_usd), "projected_energy_usd": exact_usd(energy_usd),
        "projected_cost_display": usd_text(cost), "cost_display": usd_text(f.cost),
        "gain_points": gain,
        "projected_points_per_usd": None if gain is None or cost <= 0 else float(_dec(gain) / cost),
        "projected_ipd_display": "—" if gain is None or cost <= 0 else ipd_text(_dec(gain) / cost),
        "projected_usd_per_point": exact_usd(cost / _dec(gain)) if gain and gain > 0 else None,
        "burn_usd_per_h": exact_usd(burn_usd_per_h(price, float(power_w))),
    }


def generation_by_model(start, end, book=None):
    """Generation $ / 1M rollout tokens by device model over [start, end): each job's dollars in the period x its
    generation share, over the rollout tokens of its steps recorded in the period (jobs with a split only):
    [{model, usd, tokens, usd_per_million}] by model."""
    book = book or PriceBook()
    period_usd = defaultdict(Decimal)
    for u in usage(start, end, book=book):
        if u.job_id is not None:
            period_usd[u.job_id] += u.total_usd
    facts = job_facts(period_usd, book)
    steps = dict(Step.objects.filter(job_id__in=list(period_usd), at__gte=start, at__lt=end, step__gt=0)
                 .values("job_id").annotate(n=Sum("gen_tokens")).values_list("job_id", "n"))
    by_model = defaultdict(lambda: {"usd": Decimal(0), "tokens": 0})
    for job_id, usd in period_usd.items():
        f = facts[job_id]
        split = shares(f)
        if split is None:
            continue
        m = by_model[f.model or MIXED]
        m["usd"] += usd * split["generation"]
        m["tokens"] += steps.get(job_id) or 0
    return [{"model": k, "usd": exact_usd(v["usd"]), "tokens": v["tokens"],
             "usd_per_million": exact_usd(_per_million(v["usd"], v["tokens"]) if v["tokens"] else None),
             "usd_per_million_display": usd_text(_per_million(v["usd"], v["tokens"]) if v["tokens"] else None)}
            for k, v in sorted(by_model.items())]


def what_if_input(params):
    """(model, speed-up or None) from a what-if's query (`model`, `speedup`); InputError on a bad value."""
    model = (params.get("model") or "").strip()
    if not model:
        raise InputError("model", "name the device model to re-price the job on, e.g. NVIDIA Rubin")
    raw = (params.get("speedup") or "").strip()
    if not raw:
        return model, None
    try:
        speedup = float(raw)
    except ValueError:
        raise InputError("speedup", f"speed-up must be a number above 0 (e.g. 10 for ten times the throughput), "
                                    f"got {raw!r}") from None
    if not (speedup > 0 and speedup < float("inf")):
        raise InputError("speedup", f"speed-up must be a number above 0 (e.g. 10), got {raw!r}")
    return model, speedup


def models_to_price(book=None):
    """Device model names a what-if can name: the fleet's own, and the price book's patterns without wildcards
    in them stripped of their stars (`*Rubin*` -> Rubin), sorted."""
    book = book or PriceBook()
    names = set(Device.objects.exclude(source="host").values_list("model", flat=True).distinct())
    names |= {p.strip("*") for p in book.patterns if p.strip("*") and not set(p.strip("*")) & set("*?[]")}
    return sorted(n for n in names if n and n.lower() != "cpu")

"""Intelligence per dollar: what each job's eval score gained for what it cost.

Score: the job's held-out eval pass@1 in points (trainer Step.eval_pass1;
step 0 is the baseline before any update). Gain over a period = the last
score before the period's end minus the last score before its start (the
baseline when the job had none yet), so the gains of consecutive periods add
up to the job's whole gain. States instead of divisions by zero:
"no eval yet" (no score to compare), "no cost yet" (nothing charged), "no
gain yet" (gain <= 0: IPD shown, dollars per point not), and "not measured"
(nothing charged, and it ran where no agent measures: its kind says so,
`unmeasured`), whose cost is no figure at all, never $0.00.
"""

from bisect import bisect_left
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from costs import fold
from costs.ledger import usage
from costs.models import Allocation, AttributionState
from costs.money import DISPLAY_KEYS, displays, exact_usd, usd_text
from costs.prices import PriceBook, cost_usd, model_key
from trainer.kinds import kinds
from trainer.models import Step, Stint
from trainer.runner import BUILD_PHASE

MINUTE, DAY = timedelta(minutes=1), timedelta(days=1)
NO_EVAL = "no eval yet"
NO_COST = "no cost yet"
NO_GAIN = "no gain yet"
NOT_MEASURED = "not measured"
OK = "ok"


class Scores:
    """Eval scores of some jobs, in time order, answering `at(job, t)` and `gain(job, start, end)`."""

    def __init__(self, job_ids):
        self.points = {}
        rows = (Step.objects.filter(job_id__in=list(job_ids), eval_pass1__isnull=False)
                .order_by("job_id", "at", "step").values_list("job_id", "step", "at", "eval_pass1"))
        for job_id, step, at, pass1 in rows:
            self.points.setdefault(job_id, []).append((at, step, pass1))

    def at(self, job_id, ts):
        """The newest score recorded before `ts`, or None."""
        pts = self.points.get(job_id, [])
        i = bisect_left([p[0] for p in pts], ts)
        return pts[i - 1][2] if i else None

    def baseline(self, job_id):
        pts = self.points.get(job_id, [])
        base = [p for p in pts if p[1] == 0]
        return (base or pts or [(None, None, None)])[0][2]

    def gain(self, job_id, start, end):
        """Points gained in [start, end), or None when the job had no score before `end`."""
        last = self.at(job_id, end) if end is not None else self.latest(job_id)
        if last is None:
            return None
        first = self.at(job_id, start) if start is not None else None
        if first is None:
            first = self.baseline(job_id)
        return last - first

    def latest(self, job_id):
        pts = self.points.get(job_id, [])
        return pts[-1][2] if pts else None


def ipd(gain, cost_usd):
    """(IPD points per dollar, dollars per point, state) for a gain in points and a cost in dollars.

    IPD is None without a score or a cost; dollars per point is None unless the gain is positive.
    """
    if gain is None:
        return None, None, NO_EVAL
    if cost_usd is None or cost_usd <= 0:
        return None, None, NO_COST
    points_per_usd = Decimal(repr(float(gain))) / cost_usd
    if gain <= 0:
        return points_per_usd, None, NO_GAIN
    return points_per_usd, cost_usd / Decimal(repr(float(gain))), OK


def job_intelligence(job, book=None):
    """Everything a job's IPD card shows, as a dict (money as strings rounded to the cent)."""
    book = book or PriceBook()
    rows = usage(job_ids=[job.pk], book=book)
    cost = sum((u.total_usd for u in rows), Decimal(0))
    energy_j = sum((u.energy_j for u in rows), Decimal(0))
    scores = Scores([job.pk])
    money = _money(cost, scores, job.pk, unmeasured([job.pk]).get(job.pk, ""))
    tokens = Step.objects.filter(job=job, step__gt=0).aggregate(n=Sum("gen_tokens"))["n"] or 0
    return {
        "job_id": job.pk,
        "baseline_pass1": scores.baseline(job.pk),
        "latest_pass1": scores.latest(job.pk),
        "gain_points": money["gain_points"],
        "cost_usd": money["cost_usd"],
        "ipd_points_per_usd": money["points_per_usd"],
        "usd_per_point": money["usd_per_point"],
        "state": money["state"],
        **{k: v for k, v in money.items() if k.endswith(("_display", "_title"))},
        "rollout_tokens": tokens,
        **token_figures(cost, tokens, energy_j),
        "energy_j": float(energy_j),
        "simulated": any(u.simulated for u in rows),
        "power_estimated": any(u.power_estimated for u in rows),
        "example_prices": any(u.example_price for u in rows),
    }


def token_figures(cost, tokens, energy_j):
    """{usd_per_million_tokens (exact string to the micro-dollar, rounded only for display), tokens_per_joule,
    tokens_state} of a job that generated `tokens` rollout tokens for `cost` dollars (Decimal) and `energy_j`
    joules (the job page and its live event)."""
    return {
        "usd_per_million_tokens": (exact_usd(cost / (Decimal(tokens) / 1_000_000)) if tokens and cost > 0 else None),
        "tokens_state": OK if tokens and cost > 0 else ("no tokens yet" if not tokens else NO_COST),
        "tokens_per_joule": float(Decimal(tokens) / Decimal(energy_j)) if tokens and energy_j > 0 else None,
    }


def jobs_money(job_ids, book=None, rows=None, scores=None):
    """{job id: {cost_usd, points_per_usd, usd_per_point, state, gain_points, token_figures' keys and FLAGS}} of
    many jobs at once, each as job_intelligence computes it (one usage, scores and tokens read for all).
    `rows`, `scores`: their usage and Scores where the caller has read them already."""
    book = book or PriceBook()
    job_ids = list(job_ids)
    costs = dict.fromkeys(job_ids, Decimal(0))
    energy = dict.fromkeys(job_ids, Decimal(0))
    flags = {job_id: dict.fromkeys(FLAGS, False) for job_id in job_ids}
    charged = set()  # jobs charged any device time
    for u in usage(job_ids=job_ids, book=book) if rows is None else rows:
        costs[u.job_id] += u.total_usd
        energy[u.job_id] += u.energy_j
        if u.device_s > 0:
            charged.add(u.job_id)
        for flag in FLAGS:
            flags[u.job_id][flag] |= getattr(u, flag)
    tokens = dict(Step.objects.filter(job_id__in=job_ids, step__gt=0).values("job_id")
                  .annotate(n=Sum("gen_tokens")).values_list("job_id", "n"))
    scores = scores or Scores(job_ids)
    blind = {**silent_gpus([j for j in job_ids if j not in charged]), **unmeasured(job_ids)}
    return {job_id: {**_money(cost, scores, job_id, blind.get(job_id, "")),
                     **token_figures(cost, tokens.get(job_id) or 0, energy[job_id]), **flags[job_id]}
            for job_id, cost in costs.items()}


# What a job's dollars rest on that is not measured or not real (ledger.Usage's flags): said wherever they are shown.
FLAGS = ("simulated", "power_estimated", "example_price")


# A job that held GPUs this long, in minutes attribution has charged, and was charged no device time at all: its GPUs
# sent no samples then. Two minutes: a shorter stint may fall in minutes not yet attributed, or in one alone.
SILENT_S = 120


def silent_gpus(job_ids, through=None):
    """{job id: why} of `job_ids` (jobs charged no device time) that held GPUs for SILENT_S or more in minutes
    attribution has charged (`through`: AttributionState.done_through): the GPUs sent no samples while they held them
    (an agent that lists its GPUs but reads none of their telemetry, an exporter that stopped). Their $0 is no figure:
    "not measured", as for a job on a node no agent measures."""
    if not job_ids:
        return {}
    if through is None:
        through = AttributionState.objects.filter(pk=1).values_list("done_through", flat=True).first()
        if through is None:  # attribution never ran: nothing is charged yet, which says nothing
            return {}
    held, where = {}, {}
    for job_id, node, device, started, ended in (Stint.objects.filter(job_id__in=job_ids, started_at__lt=through)
                                                 .exclude(device="cpu")
                                                 .values_list("job_id", "node", "device", "started_at", "ended_at")):
        held[job_id] = held.get(job_id, 0.0) + (min(ended or through, through) - started).total_seconds()
        where.setdefault(job_id, set()).add((node, device))
    out = {}
    for job_id, seconds in held.items():
        if seconds >= SILENT_S:
            gpus = sorted(where[job_id])
            nodes = ", ".join(sorted({n for n, _ in gpus}))
            out[job_id] = (f"its GPUs sent no samples while it held them ({len(gpus)} GPU{'s' if len(gpus) > 1 else ''}"
                           f" on {nodes}, {seconds:.0f} s): no device time or energy could be charged")
    return out


def unmeasured(job_ids):
    """{job id: why} of those of `job_ids` that ran where no agent measures, as their kinds say (Kind.unmeasured)."""
    out = {}
    for kind in kinds():
        out.update(kind.unmeasured(job_ids))
    return out


# What _money gives of a job, as the JSON API's job detail carries it.
MONEY_KEYS = ("cost_usd", "points_per_usd", "usd_per_point", "state", "gain_points", *DISPLAY_KEYS)


def charged_usd(money):
    """The Decimal dollars a jobs_money row charges: its cost, or 0 for a job nothing measured ("not measured", cost
    None), so sums over jobs (a campaign's, its budget's) add what was measured and never fail on one that wasn't."""
    return Decimal(0) if money["cost_usd"] is None else Decimal(money["cost_usd"])


def job_money(job):
    """The job's MONEY_KEYS of jobs_money: its cost and IPD, exact and as the pages write them."""
    money = jobs_money([job.pk])[job.pk]
    return {k: money[k] for k in MONEY_KEYS}


def not_measured(cost, unmeasured):
    """The fields that say a job's cost is no figure, for a job that ran where no agent measures (`unmeasured`: why)
    and was charged nothing: cost None, "not measured" shown, why on hover. {} for any other job: its cost is a
    figure (a part, where something was measured elsewhere). The one rule for every figure of a job's cost."""
    if not unmeasured or cost > 0:
        return {}
    return {"cost_usd": None, "cost_display": NOT_MEASURED, "cost_title": unmeasured, "state": NOT_MEASURED}


def _money(cost, scores, job_id, unmeasured=""):
    """A job's cost (unrounded Decimal dollars) and IPD: the gain (newest score over the baseline) over the
    unrounded cost, never over a cost rounded to the cent (a $0.0039 job is not free, nor a $0.0051 one
    $0.01). Money as exact strings to the micro-dollar, IPD as a float to 6 places, and the display
    strings (costs.money) every page and live update shows.

    `unmeasured`: why the job ran where no agent measures ("" when it did not). Then nothing charged is no
    figure (cost None, "not measured", why on hover), and a cost charged elsewhere is a part (said on hover)."""
    latest = scores.latest(job_id)
    gain = None if latest is None else latest - scores.baseline(job_id)
    if not_measured(cost, unmeasured):
        return {"points_per_usd": None, "usd_per_point": None, "gain_points": gain, **displays(),
                **not_measured(cost, unmeasured)}
    points_per_usd, usd_per_point, state = ipd(gain, cost)
    shown = displays(cost, points_per_usd, usd_per_point)
    if unmeasured:
        shown["cost_title"] = " ".join(filter(None, [shown["cost_title"], f"only what was measured: {unmeasured}"]))
    return {
        "cost_usd": exact_usd(cost),
        "points_per_usd": None if points_per_usd is None else round(float(points_per_usd), 6),
        "usd_per_point": exact_usd(usd_per_point),
        "state": state,
        "gain_points": gain,
        **shown,
    }


def spent_by(job, instants, book=None):
    """[Decimal dollars charged to the job before each of `instants`], priced like every cost figure.

    Attribution charges whole minutes; an instant inside a minute gets the share
    of that minute's cost in proportion to the seconds the job held its devices
    in the minute before the instant (its stints), so a job whose evals, or whose
    base-policy build, all fall within one minute is not charged that whole
    minute at each of them. Spending is taken as even across the held seconds of
    a minute: the samples behind a minute are not split further. A folded day
    (costs/fold.py) is one span of a day, split the same way.
    """
    book = book or PriceBook()
    spans = {}  # (start, length): dollars
    folded = fold.folded_before()
    minutes = Allocation.objects.filter(job_id=job.pk)
    if folded is not None:  # a fold under way leaves some minutes of its days: their day rows hold them
        minutes = minutes.filter(minute__gte=fold.midnight(folded))
    for minute, dev_s, joules, model, source in (minutes
                                                 .values_list("minute", "device_s", "energy_j", "device__model",
                                                              "device__source")):
        d, e = cost_usd(book.price(model_key(model, source), minute.date()), dev_s, joules)
        spans[minute, MINUTE] = spans.get((minute, MINUTE), Decimal(0)) + d + e
    now = timezone.now()
    stints = [(a, b or now) for a, b in job.stints.values_list("started_at", "ended_at")]
    # Folded days, read only for a job that held a device before the mark (a sweep's pass reads every trial's curve)
    if folded is not None and any(a < fold.midnight(folded) for a, _ in stints):
        for u in usage(end=fold.midnight(folded), job_ids=[job.pk], book=book):
            day = (fold.midnight(u.day), DAY)
            spans[day] = spans.get(day, Decimal(0)) + u.total_usd

    def held_s(start, end):
        return sum(max(0.0, (min(end, b) - max(start, a)).total_seconds()) for a, b in stints)

    out = []
    for at in instants:
        total = Decimal(0)
        for (start, length), usd in spans.items():
            end = start + length
            if end <= at:
                total += usd
            elif start < at:
                whole = held_s(start, end)
                # No stint in the span (a crash closed it at the last heartbeat): even across the span.
                share = held_s(start, at) / whole if whole else (at - start) / length
                total += usd * Decimal(repr(min(1.0, share)))
        out.append(total)
    return out


def base_build(job, metrics=None):
    """{seconds, usd, text} the job spent building its environment's base policy (the first job on an
    environment does, on its own stint, so it is part of the job's cost), {building: True, phase, text} while
    it builds it (`phase`: how the job's phase begins meanwhile), or None when it built none. `text` is what the page says beside the cost (the job
    page, and the "costs" live event for it).

    The runner records the build's start and length with the baseline (step 0); its dollars are what
    the job was charged between the two (`spent_by`, which splits the minutes the build began and ended
    in by the seconds held on each side).
    """
    shared = f"(shared by later jobs on {job.env})"
    if job.phase.startswith(BUILD_PHASE):
        return {"building": True, "phase": BUILD_PHASE, "text": f"includes the base-policy build now running {shared}"}
    if metrics is None:  # else its step 0's metrics, read with other jobs' (costs.live)
        metrics = Step.objects.filter(job=job, step=0).values_list("metrics", flat=True).first()
    metrics = metrics or {}
    began, seconds = metrics.get("base/build_started_at"), metrics.get("base/build_s")
    if began is None or seconds is None:
        return None
    before, after = spent_by(job, [datetime.fromtimestamp(began, dt_timezone.utc),
                                   datetime.fromtimestamp(began + seconds, dt_timezone.utc)])
    usd = after - before
    return {"seconds": seconds, "usd": usd,
            "text": f"includes {usd_text(usd)} / {seconds:.0f} s building the base policy {shared}"}


def score_cost_curve(job, book=None, scores=None):
    """The job's eval score against cumulative dollars: [{step, at, pass1, cost_usd}] in time order.

    The cost at a point is what the job was charged before the eval was
    recorded (`spent_by`: whole minutes before it, and the held share of the
    minute it falls in). `scores`: a Scores holding the job's, when read with other jobs'.
    """
    scores = (scores or Scores([job.pk])).points.get(job.pk, [])
    if not scores:
        return []
    spent = spent_by(job, [at for at, _, _ in scores], book)
    return [{"step": step, "at": at.isoformat(), "pass1": pass1, "cost_usd": float(usd.quantize(Decimal("0.000001")))}
            for (at, step, pass1), usd in zip(scores, spent)]


def ipd_curve(curve, baseline_pass1):
    """{step, usd, ipd}: a `score_cost_curve` as the job page's cost chart draws it (dashboard.figures.cost_ipd)
    and the "costs" live event carries it: the dollars spent by each eval, and `ipd` of the gain over the
    baseline for those dollars (None where `ipd` has no figure)."""
    points_per_usd = []
    for p in curve:
        gain = None if baseline_pass1 is None or p["pass1"] is None else p["pass1"] - baseline_pass1
        ratio, _, _ = ipd(gain, Decimal(repr(p["cost_usd"])))
        points_per_usd.append(None if ratio is None else float(ratio))
    return {"step": [p["step"] for p in curve], "usd": [p["cost_usd"] for p in curve], "ipd": points_per_usd}

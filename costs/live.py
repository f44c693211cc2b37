"""Cost figures for the live pages: today's fleet totals and each job's cost and IPD, after each attribution run.

Allocations change only when attribution runs, so the attribute task computes
what the pages show of them once and shares it twice:

- it keeps today's fleet totals in the Django cache (Redis, shared by every
  process), where the fleet page reads them (`cached_fleet_today`); the page
  computes them itself only when the cache has none;
- it publishes topic "costs", kind "costs" (`publish_figures`):

    {"fleet": {"fleet_usd": "12.34", "attributed_usd": "10.00", "idle_usd": "2.34", "fleet_display": "$12.34",
               "attributed_display": "$10.00", "idle_display": "$2.34",
               "envs": [{"env": "arithmetic", "jobs": 2, "gain_points": 6.17, "cost_usd": "10.00",
                         "ipd_points_per_usd": 0.617, "ipd_display": "0.617", "ipd_state": "ok", ...}],
               "example_prices": false, "as_of": "2025-05-01T12:00:03+00:00"},
     "jobs": [{"id": 3, "cost_usd": "1.20", "points_per_usd": 4.1, "usd_per_point": "0.24", "state": "ok",
               "cost_display": "$1.20", "ipd_display": "4.10", "usd_per_point_display": "$0.24", ...,
               "usd_per_million_tokens": "0.52", "tokens_per_joule": 3.1, "tokens_state": "ok",
               "cost_curve": {"step": [0, 10], "usd": [0.01, 1.2], "ipd": [0.0, 4.1]},
               "base_build_text": "includes $0.0012 / 60 s building the base policy (shared by ...)",
               "price_of_a_point": {...costs.tokens.decomposition: $ / 1M tokens x 1M tokens / point, phases}}]}

A job's money is its exact cost as a string to the micro-dollar and IPD a float
(6 places), as the JSON API gives them, null where the state says why there is
no figure; beside them the display strings (costs.money) the pages show, so the
JavaScript writes them as they come and never rounds again. The fleet's totals
are the cost report's, to the cent; its IPD is per environment (the sum of
that environment's jobs' gains today over the sum of their costs), idle apart.
The jobs are every queued, running or stopping one and every job whose
allocations this run replaced, each as `costs.intelligence.job_intelligence`
computes it.
"""

import logging
from datetime import datetime, time, timezone
from decimal import Decimal

from django.core.cache import cache
from django.utils import timezone as djtz

from costs import report
from costs.intelligence import Scores, base_build, ipd_curve, jobs_money, score_cost_curve
from costs.ledger import usage
from costs.money import DISPLAY_KEYS, usd_text
from costs.prices import PriceBook
from costs.tokens import decomposition, job_facts
from trainer.models import Job, Status, Step
from yardstick.live import publish

log = logging.getLogger(__name__)

# Three attribution runs: one slow or missed run does not send the fleet page back to computing.
FLEET_TODAY_TTL_S = 180
PHASES_SHOWN = ("generation", "training", "evaluation")  # of the jobs' dollars, on the fleet page's card


def fleet_today_key(day):
    """The cache key of the fleet's totals for UTC `day` (the fleet page reads the same key)."""
    return f"costs:fleet-today:{day.isoformat()}"


def fleet_today(now=None, book=None):
    """The fleet's cost and IPD over today (UTC) so far, from the cost report: {fleet_usd, attributed_usd,
    idle_usd (unrounded Decimals: a card is no report whose cells must add up to the cent, and a laptop's
    day can cost well under one), envs (the report's IPD per environment), example_prices, as_of}."""
    now = now or djtz.now()
    start = datetime.combine(now.date(), time(0), tzinfo=timezone.utc)
    today = report.build(report.Period(start, now), "day", book=book)
    totals = today.totals
    return {**{f"{k}_usd": Decimal(totals[f"{k}_exact_usd"]) for k in ("fleet", "attributed", "idle")},
            # The jobs' dollars by phase (costs.report's columns): what the fleet's forward passes cost today.
            **{f"{k}_usd": Decimal(totals[f"{k}_exact_usd"] or 0) for k in PHASES_SHOWN},
            "envs": today.ipd_groups["by_env"],
            "example_prices": totals["example_prices"], "as_of": now}


def cached_fleet_today(day):
    """Today's totals as last stored for `day`, or None when none are (or the cache cannot be reached)."""
    try:
        return cache.get(fleet_today_key(day))
    except Exception as err:  # noqa: BLE001 - a page must render without Redis: it computes the figure instead
        log.warning("fleet totals not read from the cache: %s", err)
        return None


def store_fleet_today(value, ttl_s=FLEET_TODAY_TTL_S):
    """Keep `value` (as fleet_today returns it) for its day; a cache that cannot be reached is only logged."""
    try:
        cache.set(fleet_today_key(value["as_of"].date()), value, ttl_s)
    except Exception as err:  # noqa: BLE001 - a cache that cannot be reached is only logged
        log.warning("fleet totals not stored in the cache: %s", err)


def fleet_json(value):
    """fleet_today's dict in JSON types (money as strings, as_of in ISO 8601), with the display strings."""
    money = ("fleet", "attributed", "idle", *(k for k in PHASES_SHOWN if f"{k}_usd" in value))
    return {**value, **{f"{k}_usd": str(value[f"{k}_usd"]) for k in money},
            **{f"{k}_display": usd_text(value[f"{k}_usd"]) for k in money}, "as_of": value["as_of"].isoformat()}


def figures(now=None, job_ids=(), book=None):
    """The "costs" event's data (see the module docstring) for the active jobs and `job_ids`; also
    returns fleet_today's dict: (data, fleet)."""
    now = now or djtz.now()
    book = book or PriceBook()
    fleet = fleet_today(now, book)
    active = Job.objects.filter(status__in=(Status.QUEUED, Status.RUNNING, Status.STOPPING))
    ids = sorted(set(active.values_list("pk", flat=True)) | set(job_ids))
    # Every job's usage, row, scores and step 0 read once for all, not a job at a time (a fleet runs a thousand at
    # once), and the usage once for the money and the price of a point.
    charged = usage(job_ids=ids, book=book)
    scores = Scores(ids)
    money = jobs_money(ids, book, rows=charged, scores=scores)
    rows = Job.objects.in_bulk(ids)
    builds = dict(Step.objects.filter(job_id__in=ids, step=0).values_list("job_id", "metrics"))
    facts = job_facts(ids, book, scores, rows=charged)
    jobs = [{"id": i, **{k: money[i][k] for k in ("cost_usd", "points_per_usd", "usd_per_point", "state",
                                                  "usd_per_million_tokens", "tokens_per_joule", "tokens_state",
                                                  *DISPLAY_KEYS)},
             "usd_per_million_tokens_display": usd_text(money[i]["usd_per_million_tokens"]),
             "cost_curve": _cost_curve(rows[i], book, scores),
             "base_build_text": _base_build_text(rows[i], builds.get(i, {})),
             "price_of_a_point": decomposition(facts[i])}
            for i in ids if i in rows]
    return {"fleet": fleet_json(fleet), "jobs": jobs}, fleet


def _cost_curve(job, book, scores):
    """The job page's cost/IPD chart points ({step, usd, ipd}, as dashboard.figures.cost_ipd draws them)."""
    return ipd_curve(score_cost_curve(job, book, scores), job.baseline_pass1)


def _base_build_text(job, metrics):
    """What the job page says beside the cost of the base-policy build (costs.intelligence.base_build)."""
    return (base_build(job, metrics) or {}).get("text", "")


def publish_figures(summary, now=None):
    """After attribution (`summary` as costs.attribution.attribute returns it): store today's fleet
    totals in the cache and publish the "costs" event. Return the event's data."""
    data, fleet = figures(now, summary.get("jobs", ()))
    store_fleet_today(fleet)
    publish("costs", "costs", data)
    return data

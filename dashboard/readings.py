"""What the pages show, read through the collector's, trainer's, tracking's and costs' functions.

Each function returns plain data for one page (or one part of it); the views
only parse parameters and render. Nothing here writes, and nothing here reads
another app's tables in SQL: each app names its reads (collector.store.latest_rows,
Step.columns, Step.reward_sparks, Metric.series, costs.ledger.usage).
"""

import json
import math
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from urllib.parse import quote

import numpy as np
from django.db.models import Max, Min
from django.utils import timezone as djtz

from collector import store
from collector.models import Device, DeviceEvent
from costs import live
from costs.intelligence import jobs_money, score_cost_curve
from costs.ledger import usage
from costs.prices import PriceBook
from costs.report import group_key
from dashboard import fleetstate
from dashboard.figures import sparkline
from tracking import artifacts
from tracking.ingest import DEFAULT_SCORE_KEYS, KNOWN_KEYS, STEP_MAX, score_key, unchartable
from tracking.models import SCORE_KEY_TAG, Metric
from trainer.inputs import status_filter
from trainer.models import Job, Sample, Source, Status, Step
from yardstick.inputs import InputError

CENT = Decimal("0.01")
FLEET_IPD_CACHE_S = 60  # attribution runs every minute: a fresher figure would not be newer
SPARK_POINTS = 40


# -- fleet -----------------------------------------------------------------------------


NODES_PER_PAGE = 50
NODE_SORTS = ("name", "util", "power", "newest", "status", "devices")


def fleet_snapshot(now=None):
    """(layout, frame, unhealthy events) of the fleet now, by dashboard.fleetstate's one rule: the live publisher's
    read, here for the page's render."""
    now = now or djtz.now()
    layout = fleetstate.read_layout()
    values = fleetstate.read_values(layout)
    unhealthy = DeviceEvent.unhealthy(now=now)  # every device's, in one query
    prices = fleetstate.Prices(layout, PriceBook(), now.date())
    return layout, fleetstate.compute(layout, values, fleetstate.epoch_us(now), unhealthy, prices), unhealthy


def fleet_overview(now=None, table=None):
    """The fleet page's cards, flags and one page of the node table (`node_table` with `table`, a
    dashboard.forms.NodeTable's cleaned data), and the layout and frame the page's script starts from."""
    now = now or djtz.now()
    layout, frame, unhealthy = fleet_snapshot(now)
    cards = dict(frame.cards)
    flags = {"simulated": int(np.count_nonzero(layout.device_flags & 1)),
             "power_estimated": int(np.count_nonzero(layout.device_flags & 2)),
             "example_prices": cards.pop("example_prices"), "unpriced": cards.pop("unpriced")}
    return {"cards": {**cards, "ipd_today": fleet_ipd_today(now)}, "flags": flags,
            "table": node_table(layout, frame, unhealthy, table or {}), "layout": layout, "frame": frame}


LABEL_KEYS_FIRST = ("pool", "team", "rack")


def label_keys(layout):
    """The node label keys of the fleet, pool, team and rack first: what the heatmap can group by."""
    keys = {k for labels in layout.node_labels for k in labels}
    return [k for k in LABEL_KEYS_FIRST if k in keys] + sorted(keys - set(LABEL_KEYS_FIRST))


def _node_matches(layout, filters):
    """Whether each node has a device that passes the filters ({"node", "model", "label:<key>": value})."""
    nodes = len(layout.node_ids)
    keep = np.ones(layout.size, dtype=bool)
    if filters.get("model") is not None:
        model = layout.models.index(filters["model"]) if filters["model"] in layout.models else -1
        keep &= layout.device_model == model
    ok_node = np.ones(nodes, dtype=bool)
    for key, value in filters.items():
        if key.startswith("label:"):
            ok_node &= np.array([str(labels.get(key[6:], "")) == value for labels in layout.node_labels], dtype=bool)
    if filters.get("node") is not None:
        ok_node &= np.array([name == filters["node"] for name in layout.node_names], dtype=bool)
    has = np.zeros(nodes, dtype=bool)
    has[layout.device_node[keep]] = True
    if filters.get("model") is None:
        has |= np.bincount(layout.device_node, minlength=nodes) == 0  # a node without devices matches no model
    return has & ok_node


def node_table(layout, frame, unhealthy, table):
    """One page of the node table: {"rows", "total", "page", "pages", "sort", "order", "q", "filters"}; nodes
    searched (`q` in the name, owner or a label value), filtered, sorted and paged here, NODES_PER_PAGE a page."""
    figures = fleetstate.node_figures(layout, frame)
    filters = table.get("filters") or {}
    match = _node_matches(layout, filters)
    q = (table.get("q") or "").lower()
    picked = [i for i in range(len(layout.node_ids)) if match[i] and (not q or q in layout.node_names[i].lower() or any(
        q in str(v).lower() for v in layout.node_labels[i].values()))]
    sort, order = table.get("sort") or "name", table.get("order") or "asc"
    now_us = frame.now_us

    def util(i):
        return fleetstate.util_mean(figures["util_sum"][i], figures["reporting"][i])

    keys = {
        "name": lambda i: layout.node_names[i],
        "util": lambda i: (util(i) is None, util(i) or 0),
        "power": lambda i: int(figures["power_w"][i]),
        "newest": lambda i: (figures["newest_us"][i] == 0, -int(figures["newest_us"][i])),
        "status": lambda i: bool(figures["stale"][i]),
        "devices": lambda i: int(figures["devices"][i]),
    }
    picked.sort(key=lambda i: layout.node_names[i])
    picked.sort(key=keys[sort], reverse=order == "desc")
    pages = max(1, -(-len(picked) // NODES_PER_PAGE))
    page = min(table.get("page") or 1, pages)
    shown = picked[(page - 1) * NODES_PER_PAGE:page * NODES_PER_PAGE]
    sick = {layout.position_of[d]: e for d, e in unhealthy.items() if d in layout.position_of}
    at = np.searchsorted(layout.device_node, np.arange(len(layout.node_ids) + 1))
    rows = []
    for i in shown:
        positions = range(int(at[i]), int(at[i + 1]))
        devices = [{"source": layout.device_source[p], "simulated": bool(layout.device_flags[p] & 1),
                    "power_estimated": bool(layout.device_flags[p] & 2), "label": layout.label(p),
                    "unhealthy": sick.get(p)} for p in positions]
        newest = int(figures["newest_us"][i])
        labels = layout.node_labels[i]
        rows.append({
            "name": layout.node_names[i], "position": i, "owner": labels.get("team") or None,
            "status": "stale" if figures["stale"][i] else "ok", "device_count": len(devices),
            "device_kinds": device_kinds(devices), "util_mean_pct": util(i), "power_w": int(figures["power_w"][i]),
            "newest_age_s": None if newest == 0 else (now_us - newest) / 1e6,
            "simulated": any(d["simulated"] for d in devices),
            "power_estimated": any(d["power_estimated"] for d in devices),
            "unhealthy": [d for d in devices if d["unhealthy"]],
        })
    return {"rows": rows, "total": len(picked), "nodes": len(layout.node_ids), "page": page, "pages": pages,
            "sort": sort, "order": order, "q": table.get("q") or "", "filters": filters}


def fleet_cards(rows, now, book=None, unhealthy=None):
    """The fleet page's cards (dashboard.fleetstate.compute's, by its one rule) from rows of
    collector.store.latest_rows: busy, idle, stale, devices, unhealthy (given `unhealthy`, DeviceEvent.unhealthy),
    power_kw and, with a price book, burn_usd_per_h, example_prices, unpriced. The exporter reads them so."""
    devices = [r for r in rows if r["device_id"] is not None]
    layout = fleetstate.layout_of(
        (r["node_id"], r["node"], r["labels"], r["interval_s"], r["device_id"], r["index"], r["model"], r["source"],
         r["simulated"], r["power_estimated"]) for r in rows)
    values = fleetstate.values_of(layout, (
        (r["device_id"], fleetstate.epoch_us(r["latest"]["ts"]), r["latest"]["util_pct"], r["latest"]["power_w"],
         r["latest"].get("clock_event_reasons")) for r in devices if r["latest"] is not None))
    prices = None if book is None else fleetstate.Prices(layout, book, now.date())
    cards = fleetstate.compute(layout, values, fleetstate.epoch_us(now), unhealthy or {}, prices).cards
    if unhealthy is None:
        cards.pop("unhealthy")
    return cards


def device_kinds(devices):
    """"8 GPUs", "1 CPU", "1 CPU, 2 GPUs": what a node's devices are, by Device.kind_for."""
    counts = defaultdict(int)
    for d in devices:
        counts[Device.kind_for(d["source"])] += 1
    return ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in sorted(counts.items()))


def fleet_ipd_today(now=None):
    """Today's fleet IPD: gain, dollars, state, as_of; as the attribute task last stored it (costs.live),
    else computed here and kept FLEET_IPD_CACHE_S (a cold computation reads every allocation of the day)."""
    now = now or djtz.now()
    value = live.cached_fleet_today(now.date())
    if value is None:
        value = live.fleet_today(now)
        live.store_fleet_today(value, FLEET_IPD_CACHE_S)
    return value


def fleet_power(tr):
    """[(bucket, kW)] of the whole fleet over the range (collector.store.fleet_power_kw)."""
    return store.fleet_power_kw(tr.start, tr.end)


# -- node -------------------------------------------------------------------------------------


def node_view(node, tr):
    """The node's devices (Device.to_dict, with "latest" and "unhealthy": the critical health event that makes
    it so, or None) and each one's series over the range at the range's resolution."""
    devices = list(Device.objects.filter(node=node).select_related("latest").order_by("index"))
    unhealthy = DeviceEvent.unhealthy([d.pk for d in devices])
    series = []
    for device in devices:
        latest = getattr(device, "latest", None)
        info = {**device.to_dict(), "latest": latest and latest.to_dict(), "unhealthy": unhealthy.get(device.pk),
                "scopes_text": ", ".join(["GPU", *filter(None, device.power_scopes.split(","))])}
        series.append((info, store.device_series(device, tr.start, tr.end, tr.resolution)))
    return series


HEALTH_EVENTS_SHOWN = 50


def node_health_events(node):
    """The node's newest health events (DeviceEvent), newest first, at most HEALTH_EVENTS_SHOWN."""
    return list(DeviceEvent.objects.filter(device__node=node).select_related("device")[:HEALTH_EVENTS_SHOWN])


# -- jobs --------------------------------------------------------------------------------------


# The Jobs list's filters, each a ?key= of its URL (so a recipe's or a cluster's page links to its runs, an MLflow
# experiment's link to its environment's), and the Job field it matches: its status, its kind of run, the recipe and
# the cluster it was launched with, its environment, its team and the user who started it.
JOB_FILTERS = {"status": "status", "kind": "source", "recipe": "launch__recipe_name", "cluster": "launch__cluster__name",
               "env": "env", "team": "team", "user": "created_by__username"}
JOB_FILTER_MAX_CHARS = 200


def jobs_filter(query):
    """{key: value} of the Jobs list's filters given in `query` (a QueryDict or dict; empty ones dropped); InputError
    naming a status or kind that does not exist, or a value too long to be a name."""
    out = {}
    for key in JOB_FILTERS:
        value = (query.get(key) or "").strip()
        if not value:
            continue
        if key == "status":
            value = status_filter(value)
        elif key == "kind" and value not in Source.values:
            raise InputError("kind", f"kind must be one of {', '.join(Source.values)}, or empty for every kind; "
                                     f"got {value!r}")
        elif len(value) > JOB_FILTER_MAX_CHARS:
            raise InputError(key, f"{key} must be a name of at most {JOB_FILTER_MAX_CHARS} characters, "
                                  f"got {len(value)}")
        out[key] = value
    return out


def jobs_filter_choices():
    """{key: [the values a filter can take, from the jobs there are]} for the Jobs list's filter menus."""
    jobs = Job.objects.order_by()
    return {"status": list(Status.values), "kind": list(Source.values),
            **{key: sorted(v for v in jobs.values_list(JOB_FILTERS[key], flat=True).distinct() if v)
               for key in ("recipe", "cluster", "env", "team", "user")}}


def jobs_table(filters=None, limit=100):
    """The newest `limit` jobs that match `filters` (jobs_filter's), with progress, sparkline (and its points as
    JSON, for the page to extend), cost and IPD."""
    # Its campaign, sweep and (a launched job's) cluster, shown in its row.
    jobs = Job.objects.select_related("created_by", "campaign_run__campaign", "sweep_trial__sweep", "launch__cluster")
    jobs = jobs.filter(**{JOB_FILTERS[key]: value for key, value in (filters or {}).items()})
    jobs = list(jobs[:limit])
    ids = [j.pk for j in jobs]
    # The same figures, by the same rule, as the job page, Compare and the live "costs" event.
    money = jobs_money(ids)
    sparks = Step.reward_sparks(ids, SPARK_POINTS)
    rows = []
    for job in jobs:
        m = money[job.pk]
        points = sparks.get(job.pk, [])
        rows.append({"job": job, "cost_usd": m["cost_usd"], "cost_display": m["cost_display"],
                     "cost_title": m["cost_title"], "ipd": m["points_per_usd"],
                     "usd_per_point": m["usd_per_point"], "ipd_state": m["state"], "spark": sparkline([v for _, v in points], xs=[s for s, _ in points]),
                     "spark_points": json.dumps([[s, v if v is None or math.isfinite(v) else None] for s, v in points],
                                                 separators=(",", ":")),
                     "progress_pct": round(job.progress * 100, 1)})
    return rows


def job_samples(job, step=None):
    """(step shown, rollouts of it, (first, last) step that has rollouts or None); the newest step by default."""
    bounds = Sample.objects.filter(job=job).aggregate(lo=Min("step"), hi=Max("step"))
    if bounds["hi"] is None:
        return step, [], None
    step = bounds["hi"] if step is None else step
    return step, list(Sample.objects.filter(job=job, step=step)), (bounds["lo"], bounds["hi"])


def compare_points(job):
    """Eval points of a job: [{step, hours, usd, pass1}], dollars from the cost engine's score-vs-cost curve."""
    curve = score_cost_curve(job)
    if not curve:
        return []
    first = datetime.fromisoformat(curve[0]["at"])
    start = job.started_at or first
    return [{"step": p["step"], "pass1": p["pass1"], "usd": p["cost_usd"],
             "time": round((datetime.fromisoformat(p["at"]) - start).total_seconds() / 3600, 4)} for p in curve]


# -- costs ----------------------------------------------------------------------------------------


def cost_stacks(period, group="team"):
    """[(name, idle, {day: usd})] for the stacked bars, by the table's grouping (costs.report.group_key):
    each row's attributed dollars (a job as "#id name"), then the idle dollars as "idle (...)" stacks
    (by day: "jobs" and "idle"). Dollars unrounded: a day of cheap jobs is a fraction of a cent, not nothing."""
    used = usage(period.start, period.end)
    jobs = Job.objects.in_bulk({u.job_id for u in used if u.job_id is not None}) if group == "job" else {}
    stacks, names = defaultdict(lambda: defaultdict(Decimal)), {}
    for u in used:
        idle = u.job_id is None
        key, label = ("idle" if idle else "jobs",) * 2 if group == "day" else group_key(u, group, jobs)
        if idle and group not in ("job", "day"):  # by job and by day the idle rows are named so already
            label = f"idle ({label})"
        elif group == "job" and not idle:
            label = f"#{key} {label}"
        names[idle, key] = label
        stacks[idle, key][u.day] += u.total_usd
    # Jobs in the order of their ids (by the label "#10 ..." came before "#9 ..."), the rest by name.
    def order(item):
        (idle, key), _ = item
        return (idle, int(key) if group == "job" and not idle else 0, names[idle, key])

    return [(names[k], k[0], dict(v)) for k, v in sorted(stacks.items(), key=order)]


# -- external runs (tracking) ---------------------------------------------------------------------

# Points a logged metric's chart holds at most: every stride-th value and the newest (as the sparklines).
RUN_METRIC_POINTS = 2000


def run_metric_series(run, max_points=RUN_METRIC_POINTS):
    """{key: ([steps], [values])} of everything an external run logged (tracking.models.Metric.series)."""
    return Metric.series(run, max_points)


def external_run(job):
    """What the job page shows of an external job's MLflow run: the run, its params (in place of a
    TrainConfig), its tags, its artifacts (images shown as figures), and its score: which logged metric
    it is now and why (the run's tag, its experiment's, or the frameworks' default it fell back to).
    None for an embedded job."""
    run = getattr(job, "run", None)  # a tracking.Run: only a job reported through the tracking API has one
    if run is None:
        return None
    tags = dict(run.tags.values_list("key", "value"))
    files = list(run.artifacts.order_by("path"))
    key = score_key(run)
    if tags.get(SCORE_KEY_TAG):
        why = f"set on this run by its tag {SCORE_KEY_TAG}"
    elif run.experiment.score_key:
        why = f"set for experiment {run.experiment.name!r}"
    elif key:
        why = "the default: the first logged of " + ", ".join(DEFAULT_SCORE_KEYS)
    else:
        why = "none logged yet of the defaults " + ", ".join(DEFAULT_SCORE_KEYS)
    base = f"/api/2.0/mlflow-artifacts/artifacts/{run.experiment_id}/{run.run_id}/artifacts/"
    return {
        "run": run, "experiment": run.experiment,
        "params": sorted(run.params.values_list("key", "value")),
        "tags": sorted((k, v) for k, v in tags.items() if not k.startswith("mlflow.")),
        "images": [{"path": a.path, "url": base + quote(a.path), "size_bytes": a.size_bytes} for a in files if artifacts.is_image(a)],
        "files": [{"path": a.path, "url": base + quote(a.path), "size_bytes": a.size_bytes} for a in files if not artifacts.is_image(a)],
        "artifacts_mb": sum(a.size_bytes for a in files) / artifacts.MB,
        "score_key": key, "score_why": why, "score_own": bool(tags.get(SCORE_KEY_TAG)),
        "logged_keys": sorted(run.metrics.values_list("key", flat=True).distinct()),
        "unchartable": unchartable(run), "step_max": STEP_MAX,
        "experiment_score_key": run.experiment.score_key, "default_score_keys": DEFAULT_SCORE_KEYS,
    }


def derived_metric_keys():
    """The Yardstick keys ingestion adds to an external run's steps beside what it logged (its standard
    charts read them; the page's "Logged" charts leave them out)."""
    return sorted(set(KNOWN_KEYS.values()) | {"performance/gen_tokens", "eval/pass1"})

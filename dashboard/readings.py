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
from decimal import ROUND_HALF_UP, Decimal
from urllib.parse import quote

from django.db.models import Max, Min
from django.utils import timezone as djtz

from collector import store
from collector.models import Device, DeviceEvent
from costs import live
from costs.intelligence import jobs_money, score_cost_curve
from costs.ledger import usage
from costs.prices import PriceBook, burn_usd_per_h, model_key
from costs.report import group_key
from dashboard.figures import sparkline
from tracking import artifacts
from tracking.ingest import DEFAULT_SCORE_KEYS, KNOWN_KEYS, STEP_MAX, score_key, unchartable
from tracking.models import SCORE_KEY_TAG, Metric
from trainer.models import Job, Sample, Step

CENT = Decimal("0.01")
FLEET_IPD_CACHE_S = 60  # attribution runs every minute: a fresher figure would not be newer
SPARK_POINTS = 40


# -- fleet -----------------------------------------------------------------------------


def fleet_overview(now=None):
    """Cards, the heatmap's cells and the node table: {"cards", "nodes", "flags"}, from the collector's one
    read of the fleet (collector.store.latest_rows), one read of the unhealthy devices (DeviceEvent.unhealthy)
    and the cards' one rule (`fleet_cards`). Each device has "unhealthy": the critical event, or None; each
    node "unhealthy": its devices that are."""
    now = now or djtz.now()
    rows = store.latest_rows()
    devices = [r for r in rows if r["device_id"] is not None]
    states = {r["device_id"]: Device.state_of(r["latest"], r["interval_s"], now) for r in devices}
    unhealthy = DeviceEvent.unhealthy(now=now)  # every device's, in one query
    cards = fleet_cards(devices, list(states.values()), now, PriceBook(), unhealthy)
    nodes = []
    for node, node_rows in zip(store.fleet(now, rows), _by_node(rows)):
        shown = [{**d, "stale": states[r["device_id"]] == "stale", "util_pct": _latest(d, "util_pct"),
                  "power_w": _latest(d, "power_w"), "unhealthy": unhealthy.get(r["device_id"])}
                 for d, r in zip(node["devices"], node_rows)]
        fresh = [d for d in shown if not d["stale"]]
        utils = [d["util_pct"] for d in fresh if d["util_pct"] is not None]
        newest = node["newest_sample_at"]
        nodes.append({
            "name": node["name"], "owner": node["owner"], "status": node["status"], "devices": shown,
            "device_count": len(shown), "device_kinds": device_kinds(shown),
            "util_mean_pct": sum(utils) / len(utils) if utils else None,
            # [index, util, power] of each reporting device: the page recounts the two above from live samples.
            "live_devices": json.dumps([[d["index"], d["util_pct"], d["power_w"]] for d in fresh]),
            "power_w": sum((d["power_w"] for d in fresh if d["power_w"] is not None), 0.0),
            "newest_age_s": None if newest is None else (now - newest).total_seconds(),
            "simulated": any(d["simulated"] for d in shown),
            "power_estimated": any(d["power_estimated"] for d in shown),
            "unhealthy": [d for d in shown if d["unhealthy"]],
        })
    flags = {"simulated": sum(d["simulated"] for d in devices),
             "power_estimated": sum(d["power_estimated"] for d in devices),
             "example_prices": cards.pop("example_prices"), "unpriced": cards.pop("unpriced")}
    return {"cards": {**cards, "ipd_today": fleet_ipd_today(now)}, "nodes": nodes, "flags": flags}


def _by_node(rows):
    """The device rows of latest_rows, a list per node in the order of collector.store.fleet's nodes."""
    out = []
    for row in rows:
        if not out or out[-1][0] != row["node_id"]:
            out.append((row["node_id"], []))
        if row["device_id"] is not None:
            out[-1][1].append(row)
    return [node_rows for _, node_rows in out]


def _latest(device, field):
    """A field of the device's newest sample (a row of collector.store.latest_rows, or its dict), or None."""
    return device["latest"][field] if device["latest"] else None


def fleet_cards(devices, states, now, book=None, unhealthy=None):
    """The fleet page's cards, as it renders them and as the live broadcaster sends them: busy, idle and
    stale devices by their state (Device.state_of, one per row of `devices`), all devices, and the power of
    the fresh ones (power_kw). With a price book: the burn rate, the sum of the fresh devices'
    costs.prices.burn_usd_per_h at today's prices (burn_usd_per_h, Decimal to the cent), and whether an
    example price was used or a device had none (example_prices, unpriced). With `unhealthy`
    (DeviceEvent.unhealthy: {device id: event}): how many of the devices are, whatever their state (a GPU
    fallen off the bus goes stale and is still unhealthy)."""
    out = {"busy": 0, "idle": 0, "stale": 0, "devices": len(devices)}
    if unhealthy is not None:
        out["unhealthy"] = sum(row["device_id"] in unhealthy for row in devices)
    power_w, burn, example_prices, unpriced = 0.0, Decimal(0), False, False
    for row, state in zip(devices, states):
        out[state] += 1
        if state == "stale":
            continue
        watts = _latest(row, "power_w")
        if watts is not None:
            power_w += watts
        if book is not None:
            price = book.price(model_key(row["model"], row["source"]), now.date())
            unpriced |= price is None
            example_prices |= price is not None and price.is_example
            burn += burn_usd_per_h(price, watts)
    out["power_kw"] = power_w / 1000
    if book is not None:
        out.update(burn_usd_per_h=burn.quantize(CENT, ROUND_HALF_UP), example_prices=example_prices,
                   unpriced=unpriced)
    return out


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


def jobs_table(status=None, limit=100):
    """The newest `limit` jobs with progress, sparkline (and its points as JSON, for the page to extend),
    cost and IPD."""
    jobs = Job.objects.select_related("created_by", "campaign_run__campaign")  # its campaign, shown in its row
    if status:
        jobs = jobs.filter(status=status)
    jobs = list(jobs[:limit])
    ids = [j.pk for j in jobs]
    # The same figures, by the same rule, as the job page, Compare and the live "costs" event.
    money = jobs_money(ids)
    sparks = Step.reward_sparks(ids, SPARK_POINTS)
    rows = []
    for job in jobs:
        m = money[job.pk]
        points = sparks.get(job.pk, [])
        rows.append({"job": job, "cost_usd": m["cost_usd"], "ipd": m["points_per_usd"],
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
    return [(names[k], k[0], dict(v)) for k, v in sorted(stacks.items(), key=lambda kv: (kv[0][0], names[kv[0]]))]


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

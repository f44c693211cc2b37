"""What GET /metrics tells Prometheus: the fleet, its devices, the jobs and the teams' spend, as the pages show them.

Every figure is one the pages already compute, read through the function that
computes it for them, never defined a second time here:

- devices: the collector's one read of the fleet (collector.store.latest_rows),
  each device's state by Device.state_of, the fleet's cards by
  dashboard.readings.fleet_cards (power of the fresh devices, burn rate);
- jobs: the Job row (status, steps, reward mean, score) and the cost engine's
  money of many jobs at once (costs.intelligence.jobs_money: cost, IPD, dollars
  per million rollout tokens), the numbers of the job page and the JSON API;
- spend: today's (UTC) cost report grouped by team (costs.report.build), and the
  fleet's totals as the fleet page's card has them (dashboard.readings.fleet_ipd_today).

Naming follows Prometheus: a `yardstick_` prefix, base units in the name
(watts, joules, bytes, celsius, seconds, dollars; utilization as a 0..1 ratio),
`_total` on counters only. A device's series carry `node`, `device` (its index
on the node), `model`, `simulated` and `power_estimated`, so a simulated GPU or an
estimated power is as plain in Grafana as on the pages. A job's carry `job` (its
id) and `team`.

Cardinality stays bounded: a device is one series per figure, and a job is
exported while it is queued or active and for FINISHED_JOB_KEPT_S after it ended
(then its series end, and Prometheus marks them stale).

The text is written here (`Family`), not by prometheus_client's generate_latest:
that one validates and escapes every label of every sample, about 400 ms for the
19,000 series of 1,000 devices and 1,000 jobs on a 2-core machine, twice the
scrape's whole budget; here a device's or a job's labels are escaped once and
shared by its series (bench/metrics_scrape.py). Values are formatted by
prometheus_client's floatToGoString, and the tests read the text back with its
parser.
"""

import logging
from datetime import datetime, time, timedelta
from datetime import timezone as dt_timezone

from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.utils import floatToGoString

from collector import store
from collector.models import Device
from costs import report
from costs.intelligence import jobs_money
from costs.prices import PriceBook
from dashboard.readings import fleet_cards, fleet_ipd_today
from trainer.models import ENDED, Job

log = logging.getLogger(__name__)

# The classic text format every Prometheus 2.x reads (names here are plain ASCII: nothing needs 1.0.0's escaping).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# A job that ended is exported this long after its finished_at, then dropped: a day of history in
# Prometheus for the jobs people look back on, and a bounded count of series however many jobs ran.
FINISHED_JOB_KEPT_S = 24 * 3600

# Today's spend by team reads every allocation of the day (about 1.4 million at 1,000 devices by its end);
# attribution writes them once a minute, so a fresher figure would not be newer.
# The periodic exporter.tasks.warm (every 30 s) recomputes both caches well within their lifetime.
TEAM_SPEND_CACHE_S = 90
# Jobs' money (cost, IPD, cost per 1M tokens) for the same reason: the cost changes only when attribution runs.
# 1,000 jobs' money costs a scrape about 250 ms, more than its budget; a job new since is computed at once.
MONEY_CACHE_S = 90

MIB = 1024 * 1024
DEVICE_LABELS = ("node", "device", "model", "simulated", "power_estimated")
JOB_LABELS = ("job", "team")
STATES = ("busy", "idle", "stale")


def render(now=None):
    """The exposition text of the fleet, devices, jobs and teams at `now` (Prometheus text format 0.0.4), as bytes."""
    now = now or timezone.now()
    parts = []
    for families in (device_families(store.latest_rows(), now), job_families(exported_jobs(now), now),
                     spend_families(now)):
        for family in families:
            parts.extend(family.lines())
    return "".join(parts).encode()


class Family:
    """One metric family of the exposition: its name, type ("gauge" or "counter": the samples are then
    named NAME_total), help and samples, each a label text (`labels`) and a value."""

    def __init__(self, name, kind, help_text, value=None):
        self.name = name + "_total" if kind == "counter" else name
        self.kind, self.help = kind, help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self.samples = [] if value is None else [("", value)]

    def add(self, label_text, value):
        if value is not None:
            self.samples.append((label_text, value))

    def lines(self):
        yield f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n"
        for label_text, value in self.samples:
            yield f"{self.name}{label_text} {_number(value)}\n"


def labels(names, values):
    """The label text of a sample, '{name="value",...}', the values escaped as the text format wants."""
    return "{" + ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values)) + "}"


def more_labels(label_text, names, values):
    """`label_text` (of `labels`) with more labels after its own."""
    return label_text[:-1] + "," + labels(names, values)[1:]


def _escape(value):
    text = str(value)
    if "\\" in text or "\n" in text or '"' in text:  # rare: most values are names and numbers
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return text


def _number(value):
    """A sample's value as the text format writes it; ints as they are, the rest as prometheus_client does."""
    return str(value) if type(value) is int else floatToGoString(value)


def _flag(value):
    return "true" if value else "false"


# -- devices and the fleet ------------------------------------------------------------------------------


def device_families(rows, now, book=None):
    """The device and fleet families from `rows` of collector.store.latest_rows."""
    devices = [r for r in rows if r["device_id"] is not None]
    states = [Device.state_of(r["latest"], r["interval_s"], now) for r in devices]
    cards = fleet_cards(rows, now, book or PriceBook())

    info = Family("yardstick_device_info", "gauge", "A device Yardstick collects from (one series each, value 1)")
    stale = Family("yardstick_device_stale", "gauge",
                   "1 when the device's newest sample is older than 3 of its node's intervals (or it has none): "
                   "the pages show it stale and leave it out of the fleet's power")
    age = Family("yardstick_device_sample_age_seconds", "gauge", "Seconds since the device's newest sample")
    power = Family("yardstick_device_power_watts", "gauge",
                   'Power draw of the newest sample (estimated where power_estimated="true")')
    util = Family("yardstick_device_utilization_ratio", "gauge", "Utilization of the newest sample, 0 to 1")
    mem_used = Family("yardstick_device_memory_used_bytes", "gauge", "Memory in use, newest sample")
    mem_total = Family("yardstick_device_memory_total_bytes", "gauge", "The device's memory")
    temp = Family("yardstick_device_temperature_celsius", "gauge", "Temperature of the newest sample")
    # The driver's own energy counter as the agent stores it (NVML's, in joules); it resets when the driver
    # reloads, which Prometheus's rate() and increase() expect of a counter. No counter, no series: never a 0.
    energy = Family("yardstick_device_energy_joules", "counter", "The device's energy counter (NVML), joules")

    for row, state in zip(devices, states):
        values = (row["node"], row["index"], row["model"], _flag(row["simulated"]), _flag(row["power_estimated"]))
        own = labels(DEVICE_LABELS, values)
        info.add(more_labels(own, ("uuid", "source"), (row["uuid"], row["source"])), 1)
        stale.add(own, float(state == "stale"))
        mem_total.add(own, row["mem_total_mib"] and row["mem_total_mib"] * MIB)
        latest = row["latest"]
        if latest is None:
            continue
        age.add(own, (now - latest["ts"]).total_seconds())
        power.add(own, latest["power_w"])
        util.add(own, latest["util_pct"] and latest["util_pct"] / 100)
        mem_used.add(own, latest["mem_used_mib"] and latest["mem_used_mib"] * MIB)
        temp.add(own, latest["temp_c"])
        energy.add(own, latest["energy_j"])

    by_state = Family("yardstick_fleet_devices", "gauge", "Devices by state, as the fleet page's cards count them")
    for state in STATES:
        by_state.add(labels(("state",), (state,)), cards[state])
    return [info, stale, age, power, util, mem_used, mem_total, temp, energy, by_state,
            Family("yardstick_fleet_power_watts", "gauge", "Power of the fresh devices (the fleet page's card)",
                   value=cards["power_kw"] * 1000),
            Family("yardstick_fleet_burn_rate_dollars_per_hour", "gauge",
                   "What the fresh devices cost per hour at today's prices (the fleet page's card)",
                   value=cards["burn_usd_per_h"])]


# -- jobs -----------------------------------------------------------------------------------------------


# A job's fields the scrape reads: plain values, not model instances (1,000 Jobs with their whole config
# cost a scrape about 30 ms); "config__steps" is Job.steps_total's figure, read without the rest of the config.
JOB_FIELDS = ("id", "name", "team", "env", "source", "status", "steps_done", "config__steps", "latest_reward_mean",
              "latest_pass1", "baseline_pass1")


def exported_jobs(now):
    """The jobs /metrics exports, as dicts of JOB_FIELDS: every job not ended, and each ended one for
    FINISHED_JOB_KEPT_S after its end."""
    since = now - timedelta(seconds=FINISHED_JOB_KEPT_S)
    return list(Job.objects.filter(~Q(status__in=ENDED) | Q(finished_at__gte=since)).order_by("id")
                .values(*JOB_FIELDS))


# What a scrape exports of a job's money (and so keeps in the cache: a fifth of the whole, faster to read back).
MONEY_EXPORTED = ("cost_usd", "points_per_usd", "usd_per_million_tokens")


def jobs_money_cached(job_ids, now, refresh=False):
    """costs.intelligence.jobs_money of `job_ids`, kept MONEY_CACHE_S in the shared cache (recomputed when a
    job is missing from what is kept, or on `refresh`)."""
    key = cache_keys(now.date())["jobs_money"]
    kept = {} if refresh else _cache_get(key) or {}
    if refresh or not set(job_ids) <= kept.keys():
        kept = {job_id: {k: m[k] for k in MONEY_EXPORTED} for job_id, m in jobs_money(job_ids).items()}
        _cache_set(key, kept, MONEY_CACHE_S)
    return kept


def warm(now=None):
    """Compute what a scrape would otherwise compute when its cache entry has expired (the teams' spend today,
    the exported jobs' money) and keep it: the periodic exporter.tasks.warm runs it well within the entries'
    lifetime, so a scrape reads them from the cache. Return the number of jobs whose money it kept."""
    now = now or timezone.now()
    team_spend_today(now, refresh=True)
    return len(jobs_money_cached([j["id"] for j in exported_jobs(now)], now, refresh=True))


def job_families(jobs, now):
    """The job families of `jobs` (exported_jobs), with their money as the job page and the JSON API give it (jobs_money)."""
    money = jobs_money_cached([j["id"] for j in jobs], now)
    info = Family("yardstick_job_info", "gauge", "A job Yardstick exports (one series each, value 1)")
    status = Family("yardstick_job_status", "gauge", "1 for the job's current status")
    steps = Family("yardstick_job_steps", "gauge", "Steps done")
    planned = Family("yardstick_job_steps_planned", "gauge", "Steps the job is configured to run")
    reward = Family("yardstick_job_reward_mean", "gauge", "Mean reward of the newest step")
    score = Family("yardstick_job_score_points", "gauge", "Newest eval pass@1, points")
    baseline = Family("yardstick_job_score_baseline_points", "gauge", "Eval pass@1 before the first update, points")
    cost = Family("yardstick_job_cost_dollars", "counter", "Dollars charged to the job so far (unrounded, as the job page)")
    ipd = Family("yardstick_job_ipd_points_per_dollar", "gauge",
                 "Intelligence per dollar: score gained over the baseline per dollar (absent without a score or a cost)")
    per_tokens = Family("yardstick_job_dollars_per_million_rollout_tokens", "gauge",
                        "Cost per 1M rollout tokens generated (absent before any)")
    for job in jobs:
        values = (job["id"], job["team"])
        own = labels(JOB_LABELS, values)
        m = money[job["id"]]
        info.add(more_labels(own, ("name", "env", "source"), (job["name"], job["env"], job["source"])), 1)
        status.add(more_labels(own, ("status",), (job["status"],)), 1)
        steps.add(own, job["steps_done"])
        planned.add(own, job["config__steps"] or 0)
        reward.add(own, job["latest_reward_mean"])
        score.add(own, job["latest_pass1"])
        baseline.add(own, job["baseline_pass1"])
        cost.add(own, m["cost_usd"])
        ipd.add(own, m["points_per_usd"])
        per_tokens.add(own, m["usd_per_million_tokens"])
    return [info, status, steps, planned, reward, score, baseline, cost, ipd, per_tokens]


# -- spend ----------------------------------------------------------------------------------------------


def cache_keys(day):
    """{what: cache key} of the figures a scrape keeps in the shared cache for UTC `day`."""
    return {what: f"exporter:{what}:{day.isoformat()}" for what in ("team_spend", "jobs_money")}


def team_spend_today(now, refresh=False):
    """{team: (spend, idle spend)} in Decimal dollars over today (UTC) so far: the total and idle cells of the
    cost report's rows by team, to the cent as the Costs page shows them; kept TEAM_SPEND_CACHE_S in the
    shared cache."""
    key = cache_keys(now.date())["team_spend"]
    value = None if refresh else _cache_get(key)
    if value is None:
        start = datetime.combine(now.date(), time(0), tzinfo=dt_timezone.utc)
        built = report.build(report.Period(start, now), "team")
        value = {row["team"]: (row["total_usd"], row["idle_usd"]) for row in built.rows}
        _cache_set(key, value, TEAM_SPEND_CACHE_S)
    return value


def spend_families(now):
    """Today's spend per team and the fleet's (the fleet page's "today" card)."""
    spend = Family("yardstick_team_spend_today_dollars", "gauge",
                   "Dollars a team's jobs and idle devices cost today (UTC) so far")
    idle = Family("yardstick_team_idle_spend_today_dollars", "gauge",
                  "Dollars of the team's devices standing idle today (UTC) so far")
    for team, (total, idle_usd) in sorted(team_spend_today(now).items()):
        own = labels(("team",), (team,))
        spend.add(own, total)
        idle.add(own, idle_usd)
    fleet = fleet_ipd_today(now)
    return [spend, idle,
            Family("yardstick_fleet_spend_today_dollars", "gauge", "The fleet's cost today (UTC) so far",
                   value=fleet["fleet_usd"]),
            Family("yardstick_fleet_idle_spend_today_dollars", "gauge",
                   "What the fleet's idle devices cost today (UTC) so far", value=fleet["idle_usd"])]


def _cache_get(key):
    """The shared cache's value for `key`, or None when it has none or cannot be reached (a scrape is answered
    without Redis: it computes the figure instead)."""
    try:
        return cache.get(key)
    except Exception as err:  # noqa: BLE001 - a scrape is answered without Redis
        log.warning("%s not read from the cache: %s", key, err)
        return None


def _cache_set(key, value, ttl_s):
    try:
        cache.set(key, value, ttl_s)
    except Exception as err:  # noqa: BLE001 - a scrape is answered without Redis
        log.warning("%s not stored in the cache: %s", key, err)

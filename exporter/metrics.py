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
"""

import logging
from datetime import datetime, time, timedelta
from datetime import timezone as dt_timezone

from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

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
TEAM_SPEND_CACHE_S = 60

MIB = 1024 * 1024
DEVICE_LABELS = ("node", "device", "model", "simulated", "power_estimated")
JOB_LABELS = ("job", "team")
STATES = ("busy", "idle", "stale")


def render(now=None):
    """The exposition text of everything below (Prometheus text format 0.0.4), as bytes."""
    return generate_latest(Snapshot(now or timezone.now()))


def _flag(value):
    return "true" if value else "false"


class Snapshot:
    """One scrape: `collect()` yields the metric families of the fleet, devices, jobs and teams at `now`."""

    def __init__(self, now):
        self.now = now

    def collect(self):
        yield from device_families(store.latest_rows(), self.now)
        yield from job_families(exported_jobs(self.now))
        yield from spend_families(self.now)


# -- devices and the fleet ------------------------------------------------------------------------------


def device_families(rows, now, book=None):
    """The device and fleet families from `rows` of collector.store.latest_rows."""
    devices = [r for r in rows if r["device_id"] is not None]
    states = [Device.state_of(r["latest"], r["interval_s"], now) for r in devices]
    cards = fleet_cards(devices, states, now, book or PriceBook())

    info = InfoMetricFamily("yardstick_device", "A device Yardstick collects from (one series each, value 1)",
                            labels=DEVICE_LABELS + ("uuid", "source"))
    stale = GaugeMetricFamily("yardstick_device_stale",
                              "1 when the device's newest sample is older than 3 of its node's intervals (or it has "
                              "none): the pages show it stale and leave it out of the fleet's power", labels=DEVICE_LABELS)
    age = GaugeMetricFamily("yardstick_device_sample_age_seconds", "Seconds since the device's newest sample",
                            labels=DEVICE_LABELS)
    power = GaugeMetricFamily("yardstick_device_power_watts",
                              "Power draw of the newest sample (estimated where power_estimated=\"true\")",
                              labels=DEVICE_LABELS)
    util = GaugeMetricFamily("yardstick_device_utilization_ratio", "Utilization of the newest sample, 0 to 1",
                             labels=DEVICE_LABELS)
    mem_used = GaugeMetricFamily("yardstick_device_memory_used_bytes", "Memory in use, newest sample",
                                 labels=DEVICE_LABELS)
    mem_total = GaugeMetricFamily("yardstick_device_memory_total_bytes", "The device's memory", labels=DEVICE_LABELS)
    temp = GaugeMetricFamily("yardstick_device_temperature_celsius", "Temperature of the newest sample",
                             labels=DEVICE_LABELS)
    # The driver's own energy counter as the agent stores it (NVML's, in joules); it resets when the driver
    # reloads, which Prometheus's rate() and increase() expect of a counter. No counter, no series: never a 0.
    energy = CounterMetricFamily("yardstick_device_energy_joules", "The device's energy counter (NVML), joules",
                                 labels=DEVICE_LABELS)

    for row, state in zip(devices, states):
        labels = [row["node"], str(row["index"]), row["model"], _flag(row["simulated"]), _flag(row["power_estimated"])]
        info.add_metric(labels + [row["uuid"], row["source"]], {})
        stale.add_metric(labels, float(state == "stale"))
        if row["mem_total_mib"] is not None:
            mem_total.add_metric(labels, row["mem_total_mib"] * MIB)
        latest = row["latest"]
        if latest is None:
            continue
        age.add_metric(labels, (now - latest["ts"]).total_seconds())
        for family, value, scale in ((power, latest["power_w"], 1), (util, latest["util_pct"], 0.01),
                                     (mem_used, latest["mem_used_mib"], MIB), (temp, latest["temp_c"], 1)):
            if value is not None:
                family.add_metric(labels, value * scale)
        if latest["energy_j"] is not None:
            energy.add_metric(labels, latest["energy_j"])

    by_state = GaugeMetricFamily("yardstick_fleet_devices", "Devices by state, as the fleet page's cards count them",
                                 labels=("state",))
    for state in STATES:
        by_state.add_metric([state], cards[state])
    yield from (info, stale, age, power, util, mem_used, mem_total, temp, energy, by_state)
    yield GaugeMetricFamily("yardstick_fleet_power_watts", "Power of the fresh devices (the fleet page's card)",
                            value=cards["power_kw"] * 1000)
    yield GaugeMetricFamily("yardstick_fleet_burn_rate_dollars_per_hour",
                            "What the fresh devices cost per hour at today's prices (the fleet page's card)",
                            value=float(cards["burn_usd_per_h"]))


# -- jobs -----------------------------------------------------------------------------------------------


def exported_jobs(now):
    """The jobs /metrics exports: every job not ended, and each ended one for FINISHED_JOB_KEPT_S after its end."""
    since = now - timedelta(seconds=FINISHED_JOB_KEPT_S)
    return list(Job.objects.filter(~Q(status__in=ENDED) | Q(finished_at__gte=since))
                .only("id", "name", "team", "env", "source", "status", "steps_done", "config", "latest_reward_mean",
                      "latest_pass1", "baseline_pass1").order_by("id"))


def _number(value):
    """A money string of jobs_money or a float, as a float; None stays None."""
    return None if value is None else float(value)


def job_families(jobs):
    """The job families of `jobs`, with their money as the job page and the JSON API give it (jobs_money)."""
    money = jobs_money([j.pk for j in jobs])
    info = InfoMetricFamily("yardstick_job", "A job Yardstick exports (one series each, value 1)",
                            labels=JOB_LABELS + ("name", "env", "source"))
    status = GaugeMetricFamily("yardstick_job_status", "1 for the job's current status", labels=JOB_LABELS + ("status",))
    steps = GaugeMetricFamily("yardstick_job_steps", "Steps done", labels=JOB_LABELS)
    planned = GaugeMetricFamily("yardstick_job_steps_planned", "Steps the job is configured to run", labels=JOB_LABELS)
    reward = GaugeMetricFamily("yardstick_job_reward_mean", "Mean reward of the newest step", labels=JOB_LABELS)
    score = GaugeMetricFamily("yardstick_job_score_points", "Newest eval pass@1, points", labels=JOB_LABELS)
    baseline = GaugeMetricFamily("yardstick_job_score_baseline_points", "Eval pass@1 before the first update, points",
                                 labels=JOB_LABELS)
    cost = CounterMetricFamily("yardstick_job_cost_dollars",
                               "Dollars charged to the job so far (unrounded, as the job page)", labels=JOB_LABELS)
    ipd = GaugeMetricFamily("yardstick_job_ipd_points_per_dollar",
                            "Intelligence per dollar: score gained over the baseline per dollar (absent without a "
                            "score or a cost)", labels=JOB_LABELS)
    per_tokens = GaugeMetricFamily("yardstick_job_dollars_per_million_rollout_tokens",
                                   "Cost per 1M rollout tokens generated (absent before any)", labels=JOB_LABELS)
    for job in jobs:
        labels = [str(job.pk), job.team]
        m = money[job.pk]
        info.add_metric(labels + [job.name, job.env, job.source], {})
        status.add_metric(labels + [job.status], 1)
        steps.add_metric(labels, job.steps_done)
        planned.add_metric(labels, job.steps_total)
        cost.add_metric(labels, float(m["cost_usd"]))
        for family, value in ((reward, job.latest_reward_mean), (score, job.latest_pass1),
                              (baseline, job.baseline_pass1), (ipd, m["points_per_usd"]),
                              (per_tokens, _number(m["usd_per_million_tokens"]))):
            if value is not None:
                family.add_metric(labels, value)
    yield from (info, status, steps, planned, reward, score, baseline, cost, ipd, per_tokens)


# -- spend ----------------------------------------------------------------------------------------------


def team_spend_key(day):
    """The cache key of the teams' spend on UTC `day`."""
    return f"exporter:team-spend:{day.isoformat()}"


def team_spend_today(now):
    """{team: (spend, idle spend)} in Decimal dollars over today (UTC) so far: the total and idle cells of the
    cost report's rows by team, to the cent as the Costs page shows them; kept TEAM_SPEND_CACHE_S in the shared cache."""
    key = team_spend_key(now.date())
    try:
        value = cache.get(key)
    except Exception as err:  # a scrape must be answered without Redis: it computes the figure instead
        log.warning("team spend not read from the cache: %s", err)
        value = None
    if value is not None:
        return value
    start = datetime.combine(now.date(), time(0), tzinfo=dt_timezone.utc)
    built = report.build(report.Period(start, now), "team")
    value = {row["team"]: (row["total_usd"], row["idle_usd"]) for row in built.rows}
    try:
        cache.set(key, value, TEAM_SPEND_CACHE_S)
    except Exception as err:
        log.warning("team spend not stored in the cache: %s", err)
    return value


def spend_families(now):
    """Today's spend per team and the fleet's (the fleet page's "today" card)."""
    spend = GaugeMetricFamily("yardstick_team_spend_today_dollars",
                              "Dollars a team's jobs and idle devices cost today (UTC) so far", labels=("team",))
    idle = GaugeMetricFamily("yardstick_team_idle_spend_today_dollars",
                             "Dollars of the team's devices standing idle today (UTC) so far", labels=("team",))
    for team, (total, idle_usd) in sorted(team_spend_today(now).items()):
        spend.add_metric([team], float(total))
        idle.add_metric([team], float(idle_usd))
    fleet = fleet_ipd_today(now)
    yield from (spend, idle)
    yield GaugeMetricFamily("yardstick_fleet_spend_today_dollars", "The fleet's cost today (UTC) so far",
                            value=float(fleet["fleet_usd"]))
    yield GaugeMetricFamily("yardstick_fleet_idle_spend_today_dollars",
                            "What the fleet's idle devices cost today (UTC) so far", value=float(fleet["idle_usd"]))

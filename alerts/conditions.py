"""Each rule kind's condition: which subjects are in breach now, read from the data already stored.

`breaches(rule, now)` returns {subject: (value, message)}; the evaluation
(alerts/evaluate.py) fires what is new and resolves what is gone. Every read
goes through the owning app's read functions or models (collector.store,
costs.ledger, trainer.models): nothing here writes, and nothing runs on the
write path of telemetry or training.
"""

from datetime import timedelta
from decimal import Decimal

from django.db.models import Count, Min, Q

from collector import store
from collector.models import Device, DeviceEvent, Node, Sample
from costs.ledger import job_costs, usage
from costs.money import usd_text
from launch.models import Cluster
from trainer.models import ACTIVE, Job, Status, Step


def breaches(rule, now):
    """{subject: (value, message)} of what `rule` finds in breach at `now`."""
    return CONDITIONS[rule.kind](rule, now)


def register(name, condition):
    """The condition of a rule kind an app above alerts defines (alerts.models.register_kind), from its ready()."""
    CONDITIONS[name] = condition


# -- the fleet ------------------------------------------------------------------------------------


def _fleet_rows(rule):
    """latest_rows limited to the rule's scope (node:<name> or team:<the node's owner>)."""
    prefix, value = rule.scope_parts()
    rows = store.latest_rows()
    if prefix == "node":
        rows = [r for r in rows if r["node"] == value]
    elif prefix == "team":
        rows = [r for r in rows if r["labels"].get("team") == value]
    return rows


def gpu_idle(rule, now):
    """GPUs idle now (Device.state_of) that had no busy sample (>= Device.BUSY_UTIL_PCT) for `duration` minutes
    and were reporting from the window's start (a sample within the node's stale interval of it)."""
    since = now - timedelta(minutes=rule.duration)
    idle = {r["device_id"]: r for r in _fleet_rows(rule)
            if r["device_id"] is not None and Device.kind_for(r["source"]) == "GPU"
            and Device.state_of(r["latest"], r["interval_s"], now) == "idle"}
    if not idle:
        return {}
    windows = (Sample.objects.filter(device_id__in=list(idle), ts__gte=since, ts__lte=now)
               .values("device_id")
               .annotate(busy=Count("ts", filter=Q(util_pct__gte=Device.BUSY_UTIL_PCT)), first=Min("ts")))
    out = {}
    for w in windows:
        row = idle[w["device_id"]]
        reporting_since = (w["first"] - since).total_seconds() <= Node.STALE_INTERVALS * row["interval_s"]
        if w["busy"] == 0 and reporting_since:
            util = row["latest"]["util_pct"]
            label = Device.label_for(row["source"], row["index"])
            out[f"device:{row['node']}/{row['index']}"] = (
                util, f"{label} on {row['node']} idle (below {Device.BUSY_UTIL_PCT:g}% utilization) for over "
                      f"{rule.duration} min")
    return out


def node_stale(rule, now):
    """Nodes stale (Node.is_stale) for longer than `duration` minutes: stale since their newest sample plus
    Node.STALE_INTERVALS intervals, or since they were first seen when they never sent one."""
    newest = {}
    for r in _fleet_rows(rule):
        ts = r["latest"] and r["latest"]["ts"]
        name = r["node"]
        if name not in newest or (ts and (newest[name][0] is None or ts > newest[name][0])):
            newest[name] = (ts, r["interval_s"])
    first_seen = dict(Node.objects.filter(name__in=list(newest)).values_list("name", "first_seen"))
    out = {}
    for name, (ts, interval_s) in newest.items():
        if not Node.is_stale(ts, interval_s, now):
            continue
        stale_since = ts + timedelta(seconds=Node.STALE_INTERVALS * interval_s) if ts else first_seen[name]
        minutes = (now - stale_since).total_seconds() / 60
        if minutes > rule.duration:
            said = f"newest sample {ts:%Y-%m-%d %H:%M:%S} UTC" if ts else "no sample ever"
            out[f"node:{name}"] = (round(minutes, 1), f"node {name} stale for {minutes:.0f} min ({said})")
    return out


def device_unhealthy(rule, now):
    """Devices with a critical health event (XID needing a reset, uncorrected ECC errors, a row remapping pending
    or failed) within DeviceEvent.UNHEALTHY_FOR; it resolves once that long has passed without another."""
    rows = {r["device_id"]: r for r in _fleet_rows(rule) if r["device_id"] is not None}
    out = {}
    for device_id, event in DeviceEvent.unhealthy(rows, now).items():
        row = rows[device_id]
        label = Device.label_for(row["source"], row["index"])
        out[f"device:{row['node']}/{row['index']}"] = (
            event.code, f"{label} on {row['node']} is unhealthy: {event.detail} at {event.ts:%Y-%m-%d %H:%M:%S} UTC")
    return out


# -- money ----------------------------------------------------------------------------------------


def idle_spend(rule, now):
    """Teams whose idle device time cost more than `threshold` dollars per hour over the last `duration`
    minutes (the cost ledger's idle allocations, charged to node owners; attributed minutes only)."""
    prefix, team = rule.scope_parts()
    spent = {}
    for u in usage(start=now - timedelta(minutes=rule.duration), end=now):
        if u.job_id is None and (prefix is None or u.team == team):
            spent[u.team] = spent.get(u.team, Decimal(0)) + u.total_usd
    out = {}
    for name, usd in spent.items():
        per_hour = usd * 60 / rule.duration
        if per_hour > Decimal(str(rule.threshold)):
            out[f"team:{name}"] = (float(per_hour), f"team {name}'s idle devices cost {usd_text(per_hour)}/h over "
                                                    f"the last {rule.duration} min (limit ${rule.threshold:g}/h)")
    return out


def _jobs(rule):
    prefix, value = rule.scope_parts()
    jobs = Job.objects.all()
    if prefix == "team":
        jobs = jobs.filter(team=value)
    elif prefix == "job":
        jobs = jobs.filter(pk=value)
    return jobs


def job_failed(rule, now):
    """Jobs failed now; those that ended before the rule existed are history, not news."""
    jobs = _jobs(rule).filter(status=Status.FAILED).exclude(finished_at__lt=rule.created_at)
    return {f"job:{j.pk}": (None, f"job {j.pk} {j.name!r} ({j.team}) failed" + (f": {j.error}" if j.error else ""))
            for j in jobs.only("pk", "name", "team", "error")}


def queued_long(rule, now):
    """Jobs waiting in the line for devices (trainer/queue.py) for longer than `duration` minutes, saying what for and
    their place; resolved when one starts or leaves the line."""
    cutoff = now - timedelta(minutes=rule.duration)
    jobs = _jobs(rule).filter(status=Status.QUEUED, queued_at__lte=cutoff, placed_at__isnull=True)
    out = {}
    for job in jobs.only("pk", "name", "team", "queued_at", "waiting_for"):
        minutes = (now - job.queued_at).total_seconds() / 60
        out[f"job:{job.pk}"] = (round(minutes, 1), f"job {job.pk} {job.name!r} ({job.team}) has waited {minutes:.0f} "
                                                   f"min in the line: {job.waiting_for or 'not yet placed'}")
    return out


def budget(rule, now):
    """Jobs with a budget whose cost so far is at least `threshold` percent of it: queued or active jobs, and
    jobs stopped by their budget since the rule exists (the stop may come between two evaluations)."""
    jobs = {j.pk: j for j in _jobs(rule).filter(budget_usd__gt=0).filter(
        Q(status__in=(Status.QUEUED, *ACTIVE))
        | (Q(status=Status.BUDGET_EXHAUSTED) & ~Q(finished_at__lt=rule.created_at)))}
    out = {}
    for job_id, cost in job_costs(list(jobs)).items():
        job = jobs[job_id]
        pct = cost / job.budget_usd * 100
        if pct >= Decimal(str(rule.threshold)):
            out[f"job:{job_id}"] = (float(pct), f"job {job_id} {job.name!r} ({job.team}) spent {usd_text(cost)}, "
                                                f"{pct:.0f}% of its budget {usd_text(job.budget_usd)}")
    return out


# -- training ---------------------------------------------------------------------------------------


def _last_steps(rule, key):
    """{job: [the last `duration` values of step metric `key`]} of active jobs with that many steps logged."""
    out = {}
    for job in _jobs(rule).filter(status__in=ACTIVE).only("pk", "name", "team"):
        steps, columns = Step.columns(job, [key])
        values = [v for s, v in zip(steps, columns[key]) if s > 0]  # step 0 is the baseline eval: no update
        if len(values) >= rule.duration:
            out[job] = values
    return out


def reward_drop(rule, now):
    """Active jobs whose train/reward_mean stayed more than `threshold` below its best for the last
    `duration` steps."""
    out = {}
    for job, values in _last_steps(rule, "train/reward_mean").items():
        known = [v for v in values if v is not None]
        last = values[-rule.duration:]
        if not known or None in last:
            continue
        best = max(known)
        if all(v < best - rule.threshold for v in last):
            out[f"job:{job.pk}"] = (best - last[-1], f"job {job.pk} {job.name!r}: reward mean {last[-1]:.3g} is "
                                                     f"{best - last[-1]:.3g} below its best {best:.3g} for "
                                                     f"{rule.duration} steps")
    return out


def _for_steps(rule, key, breached, words):
    out = {}
    for job, values in _last_steps(rule, key).items():
        last = values[-rule.duration:]
        if None not in last and all(breached(v) for v in last):
            out[f"job:{job.pk}"] = (last[-1], f"job {job.pk} {job.name!r}: {key} {last[-1]:.3g} {words} "
                                              f"{rule.threshold:g} for {rule.duration} steps")
    return out


def kl_high(rule, now):
    return _for_steps(rule, "train/kl", lambda v: v > rule.threshold, "above")


def entropy_low(rule, now):
    return _for_steps(rule, "train/entropy", lambda v: v < rule.threshold, "below")


# -- clusters -------------------------------------------------------------------------------------


def cluster_unreachable(rule, now):
    """Clusters Yardstick launches on (launch.models.Cluster) whose follower has had no answer for longer than
    `duration` minutes; their jobs are marked "cluster unreachable", not failed. Resolved at the first answer."""
    prefix, name = rule.scope_parts()
    clusters = Cluster.objects.filter(unreachable_since__isnull=False)
    if prefix == "cluster":
        clusters = clusters.filter(name=name)
    out = {}
    for cluster in clusters:
        minutes = (now - cluster.unreachable_since).total_seconds() / 60
        if minutes >= rule.duration:
            live = len(cluster.live_jobs())
            out[f"cluster:{cluster.name}"] = (
                round(minutes, 1), f"{cluster.kind} cluster {cluster.name} ({cluster.address}) has not answered for "
                                   f"{minutes:.0f} min ({live} live job(s) on it): {cluster.error or 'no answer'}")
    return out


CONDITIONS = {"gpu_idle": gpu_idle, "node_stale": node_stale, "device_unhealthy": device_unhealthy,
              "idle_spend": idle_spend, "job_failed": job_failed, "cluster_unreachable": cluster_unreachable,
              "queued_long": queued_long,
              "budget": budget, "reward_drop": reward_drop, "kl_high": kl_high, "entropy_low": entropy_low}

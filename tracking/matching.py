"""Which devices an outside run used: its GPU holders become stints of its job, charged like any job's.

The yardstick-mlflow package (client/) tags each run with the host, PID and
launcher job ids of the process that started it; the node agents record, for
each process holding a device, its ancestor PIDs and the launcher ids in its
environment (collector/agent/lineage.py). A run's holders are

- on its host (`yardstick.host`, the node of that name, FQDN or short): the
  process `yardstick.pid` itself and every process it started, a few levels
  down (torchrun ranks, vLLM / rollout workers);
- on any node: the processes whose environment carries the run's launcher id
  (`yardstick.torchelastic_run_id` = TORCHELASTIC_RUN_ID, `yardstick.slurm_job_id`
  = SLURM_JOB_ID, `yardstick.ray_job_id` = RAY_JOB_ID): the other nodes of a
  multi-node run;

held at or after the run's start (an older process that had the same PID does
not count). Each device they hold becomes a `trainer.Stint` of the run's job,
from when the holding began (not before the run started) and open while a
holder is seen; a stint ends at the holder's last sighting once it has been
unseen for HOLDER_GONE_S, and every open stint ends when the run ends. The
cost engine (costs/attribution.py) then charges device time and energy over
those stints as for embedded jobs.

`match_runs` is idempotent: it runs every 30 s (tracking.tasks.match_runs) and
a second run changes nothing. It never edits a stint that has ended or moves
one's start (attribution has charged those minutes already and only re-reads
a stint that was open at its last run); a holding seen again after its stint
ended gets a new stint.

Without the package an operator binds a run to devices on its job page
(`bind`): those stints carry pid BOUND_PID, run from the run's start and end
with the run; holder matching leaves them alone.
"""

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from collector.models import Device, DeviceHolder
from tracking.models import Run
from trainer.models import ACTIVE, Source, Stint

# Tag (set by yardstick-mlflow) -> the environment variable the agent records it under.
LAUNCHER_TAGS = {
    "yardstick.torchelastic_run_id": "TORCHELASTIC_RUN_ID",
    "yardstick.slurm_job_id": "SLURM_JOB_ID",
    "yardstick.ray_job_id": "RAY_JOB_ID",
    # A job Yardstick launched (launch/): every process of it carries YARDSTICK_JOB_ID, on any node.
    "yardstick.job_id": "YARDSTICK_JOB_ID",
}
HOST_TAG, PID_TAG = "yardstick.host", "yardstick.pid"
# A holder unseen this long is gone. Above the host source's holder scan (every
# 10 s, busy processes only) and a few agent batches, so a pause is not an end.
HOLDER_GONE_S = 60
# Stints an operator bound by hand have no process.
BOUND_PID = 0


def device_key(device):
    """(node, device) as a stint names them: "cpu" for a node's host device, else the GPU's UUID."""
    return device.node.name, "cpu" if device.source == "host" else device.uuid


def device_name(device):
    return "cpu" if device.source == "host" else device.model


def run_tags(run):
    return {t.key: t.value for t in run.tags.filter(key__startswith="yardstick.")}


def holders_of(run, tags=None):
    """The DeviceHolder rows of `run`'s processes (see the module docstring), with device and node."""
    tags = run_tags(run) if tags is None else tags
    ways = []
    host, pid = tags.get(HOST_TAG, "").strip(), tags.get(PID_TAG, "").strip()
    if host and pid.isdigit():
        short = host.split(".")[0]
        on_host = (Q(device__node__name__iexact=host) | Q(device__node__name__iexact=short)
                   | Q(device__node__name__istartswith=f"{short}."))
        ways.append(on_host & (Q(pid=int(pid)) | Q(ancestor_pids__contains=[int(pid)])))
    for tag, var in LAUNCHER_TAGS.items():
        value = tags.get(tag, "").strip()
        if value:
            ways.append(Q(launcher_ids__contains={var: value}))
    if not ways:  # neither a host and PID nor a launcher id: nothing to match
        return DeviceHolder.objects.none()
    match = ways[0]
    for way in ways[1:]:
        match |= way
    start = _ms(run.start_time)
    return (DeviceHolder.objects.filter(match, last_seen__gte=start, pid__isnull=False)
            .select_related("device__node").order_by("device_id", "first_seen"))


def _ms(ms):
    """A run's time (ms since the epoch, as MLflow sends it) as an aware datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=dt_timezone.utc)


def match_run(run, now=None, skip_node=""):
    """Bring `run`'s stints in line with its holders; return {"created": n, "ended": n}. `skip_node`: a node whose
    stints are not the holders' to make or end (a launched job's own node: its worker gave it those devices)."""
    now = now or timezone.now()
    job = run.job
    counts = {"created": 0, "ended": 0}
    active = job.status in ACTIVE
    run_start = _ms(run.start_time)
    run_end = _ms(run.end_time) if run.end_time else now
    gone_before = now - timedelta(seconds=HOLDER_GONE_S)
    held = {}  # (node, device) -> (Device, [(start, last seen, pid)]): the holdings of the run's processes
    for h in holders_of(run):
        if skip_node and h.device.node.name == skip_node:
            continue
        held.setdefault(device_key(h.device), (h.device, []))[1].append(
            (max(h.first_seen, run_start), h.last_seen, h.pid))
    with transaction.atomic():
        for stint in Stint.objects.select_for_update().filter(job=job, ended_at__isnull=True).exclude(node=skip_node):
            last = max((p[1] for p in held.get((stint.node, stint.device), (None, ()))[1]), default=None)
            if not active:  # the run ended: so does everything it held
                end = run_end if stint.pid == BOUND_PID or last is None else min(run_end, last)
                counts["ended"] += _end(stint, end, f"run {job.status}", job)
            elif stint.pid != BOUND_PID and (last is None or last < gone_before):
                counts["ended"] += _end(stint, last or stint.started_at, "holder gone", job)
        if active:
            stints = list(job.stints.exclude(node=skip_node))
            for key, (device, periods) in held.items():
                counts["created"] += _cover(job, key, device, periods, stints, gone_before)
    if counts["created"] or counts["ended"]:
        transaction.on_commit(job.announce_stints)
    return counts


def _end(stint, at, reason, job):
    """End an open stint at `at` (never before its start); 1 when this call ended it."""
    return Stint.objects.filter(pk=stint.pk, ended_at__isnull=True).update(
        ended_at=max(at, stint.started_at), end_reason=reason, last_step=job.steps_done)


def _cover(job, key, device, periods, stints, gone_before):
    """Add a stint for the holdings of one device that no stint of the job covers yet (an open or
    bound stint covers everything from its start; an ended one up to its end); 1 when it added one."""
    mine = [s for s in stints if (s.node, s.device) == key]
    if any(s.ended_at is None for s in mine):
        return 0
    covered_until = max((s.ended_at for s in mine), default=None)
    periods = [p for p in periods if covered_until is None or p[1] > covered_until]
    if not periods:
        return 0
    start, _, pid = min(periods)
    if covered_until is not None:
        start = max(start, covered_until)
    last = max(p[1] for p in periods)
    ended = None if last >= gone_before else last  # held and already gone between two matchings
    Stint.objects.create(job=job, node=key[0], device=key[1], device_name=device_name(device), pid=pid,
                         started_at=start, ended_at=ended, end_reason="holder gone" if ended else "",
                         first_step=job.steps_done, last_step=job.steps_done if ended else None)
    return 1


def match_runs(now=None):
    """Match every active external run, and end the stints of those that ended; return the totals."""
    now = now or timezone.now()
    totals = {"runs": 0, "created": 0, "ended": 0}
    open_jobs = Stint.objects.filter(ended_at__isnull=True).values("job_id")
    runs = Run.objects.filter(Q(job__status__in=ACTIVE) | Q(job_id__in=open_jobs),
                              job__source=Source.EXTERNAL).select_related("job")
    for run in runs:
        counts = match_run(run, now)
        totals["runs"] += 1
        totals["created"] += counts["created"]
        totals["ended"] += counts["ended"]
    return totals


def bind(run, node, device_uuids, by=None):
    """An operator's binding of `run` to devices of `node` (no package in its environment): one open
    stint per device from the run's start, ended with the run. Devices already held by the job are
    skipped. Return the stints created; ValueError (for people) for a device not on the node."""
    devices = {d.uuid: d for d in Device.objects.filter(node__name=node).select_related("node")}
    unknown = [u for u in device_uuids if u not in devices]
    if unknown:
        raise ValueError(f"device {unknown[0]!r} is not on node {node!r}; its devices are "
                         f"{', '.join(sorted(devices)) or 'none'}")
    if not device_uuids:
        raise ValueError(f"choose at least one device of node {node!r} to bind the run to")
    job = run.job
    start = _ms(run.start_time)
    end = None if job.status in ACTIVE else (_ms(run.end_time) if run.end_time else timezone.now())
    created = []
    with transaction.atomic():
        held = {(s.node, s.device) for s in job.stints.filter(ended_at__isnull=True)}
        for uuid in dict.fromkeys(device_uuids):
            key = device_key(devices[uuid])
            if key in held:
                continue
            created.append(Stint.objects.create(
                job=job, node=key[0], device=key[1], device_name=device_name(devices[uuid]), pid=BOUND_PID,
                started_at=start, ended_at=end, end_reason=f"bound by {by}" if by and end else "",
                first_step=0, last_step=job.steps_done if end else None))
        if created:
            transaction.on_commit(job.announce_stints)
    return created

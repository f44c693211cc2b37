"""Attribution: every device-minute of telemetry charged to the jobs that held the device, the rest to idle.

Input: the collector's 1-minute rollups (device, bucket, covered_s, energy_j,
energy_from) and the trainer's stints (job, node, device, started_at,
ended_at; an open stint holds its device until now). Output: `Allocation`
rows, one per (device, minute, job-or-idle); see costs/models.py for why.

The split of one minute (`split_minute`): each job's held seconds are the
union of its stints' overlap with the minute; the share of the minute held by
*some* job is the union over all jobs, divided among them in proportion to
their held seconds (two jobs sharing a GPU at once split it; back to back they
get their own time). A job's device-seconds and joules are its share of the
rollup's covered_s and energy_j; idle gets exactly what is left, so the rows
of a minute always sum to the rollup (numeric arithmetic, 15 decimal places,
job shares rounded down). Energy is spread evenly over the minute: the rollup
is the finest figure attribution reads.

A stint on device "cpu" means the `host` device of the stint's node; any
other stint device is a GPU UUID. A stint whose device has no telemetry is
charged nothing (there is nothing measured to charge).

Incremental and idempotent (`attribute`): each run recomputes whole minutes,
replacing their rows, and reads only what changed since the last run, so its
work grows with the fleet's new minutes, not with devices x a lookback:
- every device's minutes in [done_through, now rounded down to the minute):
  the minutes closed since the last run;
- single minutes up to LATE_WINDOW before done_through whose rollup was
  written since the last run (late or replayed samples, a roll-up that ran
  after the minute was attributed) and changed since it was attributed: the
  run takes a pg_snapshot before it reads (`AttributionState.rollups_seen`)
  and the next asks the collector for the rollups written by transactions
  that snapshot did not see (collector.store.rollups_written_since, an index
  on the writing transaction), then compares each with the copy of its
  figures its rows keep;
- for the devices of the stints that changed, from the change on: each stint
  open at the last run and closed now (from its end: a crash found late sets
  ended_at back to the last heartbeat), each started since (from its start),
  and each that started or ended in the LOOKBACK before done_through that
  the last run did not see, though it read newer ones (from then: a stint
  whose row committed late). The last run saw the stints open then and those
  of its lookback that had ended (`AttributionState.recent_stints`), so a
  thousand jobs started at once are recomputed from their start once, not
  at every run of the next ten minutes.
What the last run charged to other devices stays as it is: an owner label set
on a node (who pays for its idle time) holds from the minutes attributed
after it on. Older late data (an nvidia-smi import of last month) is
attributed by the import itself (`attribute_window`), or by
`attribute(since=...)` (`manage.py attribute_costs --since DATE`). The first
run ever starts at the oldest rollup; the first run after an upgrade, with no
snapshot yet, also recomputes the LOOKBACK before done_through and scans the
LATE_WINDOW for changed rollups, as every run did before.
"""

import logging
from collections import defaultdict
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from collector import store
from costs import fold
from costs.models import Allocation, AttributionState
from trainer.models import Job, Stint

log = logging.getLogger(__name__)

LOOKBACK = timedelta(minutes=10)
LATE_WINDOW = timedelta(hours=6)
CHUNK = timedelta(hours=6)  # minutes recomputed per transaction, to bound memory
MINUTE = timedelta(minutes=1)
MINUTE_S = Decimal(60)
PLACES = Decimal("1e-15")
IDLE_TEAM = "unassigned"


def floor_minute(ts):
    return ts.replace(second=0, microsecond=0)


def _seconds(delta):
    """A timedelta as an exact Decimal of seconds."""
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / 1_000_000


def _union_s(intervals):
    """Total length in seconds of the union of (start, end) Decimal-second intervals."""
    total = Decimal(0)
    end_so_far = None
    for start, end in sorted(intervals):
        if end_so_far is None or start > end_so_far:
            total += end - start
            end_so_far = end
        elif end > end_so_far:
            total += end - end_so_far
            end_so_far = end
    return total


def split_minute(covered_s, energy_j, holds):
    """Split one rollup minute among its holders.

    `holds` maps job id -> [(start_s, end_s), ...], offsets within the minute
    (0..60, Decimal). Return [(job id or None for idle, held_s, device_s,
    energy_j)], device_s and energy_j as Decimal, summing exactly to the
    inputs (given as Decimal or float). The idle row is present whenever the
    jobs did not hold the whole minute.
    """
    covered = _dec(covered_s)
    energy = _dec(energy_j)
    held = {job: _union_s(iv) for job, iv in holds.items()}
    held = {job: s for job, s in held.items() if s > 0}
    busy_s = _union_s([i for iv in holds.values() for i in iv])
    sum_held = sum(held.values(), Decimal(0))
    rows = []
    used_s = used_j = Decimal(0)
    for job in sorted(held):
        # share of the minute = held_j / 60 scaled so shares of overlapping holders add up to the busy share
        share = held[job] * busy_s / (MINUTE_S * sum_held)
        dev = (covered * share).quantize(PLACES, rounding=ROUND_DOWN)
        joules = (energy * share).quantize(PLACES, rounding=ROUND_DOWN)
        rows.append([job, float(held[job]), dev, joules])
        used_s += dev
        used_j += joules
    idle_held = MINUTE_S - busy_s
    if rows and idle_held <= 0:
        # Held all minute: the rounding crumbs go to the last holder, not to an idle row.
        rows[-1][2] += covered - used_s
        rows[-1][3] += energy - used_j
    else:
        rows.append([None, float(max(idle_held, Decimal(0))), covered - used_s, energy - used_j])
    return [tuple(r) for r in rows]


def _dec(value):
    return value if isinstance(value, Decimal) else Decimal(repr(float(value))).quantize(PLACES)


# -- reading the inputs -----------------------------------------------------------


def _stints(lo, hi, now):
    """Stints overlapping [lo, hi), resolved to collector device ids: {device id: [(job id, start, end)]}.

    A GPU stint names its device by UUID; a CPU stint ("cpu") holds the host device of its node."""
    stints = [(job_id, node, device, start, end or now) for job_id, node, device, start, end in
              Stint.objects.filter(started_at__lt=hi).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=lo))
              .values_list("job_id", "node", "device", "started_at", "ended_at")]
    stints = [s for s in stints if s[4] > lo and s[4] > s[3]]
    gpus = store.device_ids({device for _, _, device, _, _ in stints if device != "cpu"})
    hosts = store.host_device_ids({node for _, node, device, _, _ in stints if device == "cpu"})
    by_device = defaultdict(list)
    for job_id, node, device, start, end in stints:
        for device_id in hosts.get(node, []) if device == "cpu" else [gpus[device]] if device in gpus else []:
            by_device[device_id].append((job_id, start, end))
    return by_device


def _rollups(lo, hi, pairs=None):
    """Rollup minutes in [lo, hi) (or only the (device, minute) `pairs`), each with its device's node owner
    (IDLE_TEAM without one): collector.store.rollup_minutes."""
    return [(*r[:6], r[6] or IDLE_TEAM, r[7]) for r in store.rollup_minutes(lo, hi, pairs)]


def attribute_imported(sender, lo, hi, now=None, **kwargs):
    """collector.signals.imported's receiver: attribute the imported window; return attribute_window's summary."""
    return attribute_window(lo, hi, now=now)


def _changed_minutes(lo, hi):
    """(device, minute) pairs in [lo, hi) whose rollup has no allocation or changed since it was attributed.

    It compares every rollup of LATE_WINDOW (6 h of every device) with the allocations made from it, which
    only the database can do without shipping them: one NOT EXISTS over collector.store.rollup_minutes_in.
    Only the first run after an upgrade does (no snapshot yet to ask what was written since: _changed_since)."""
    attributed = Allocation.objects.filter(
        device_id=OuterRef("device_id"), minute=OuterRef("bucket"), rollup_samples=OuterRef("samples"),
        rollup_covered_s=OuterRef("covered_s"), rollup_energy_j=OuterRef("energy_j"))
    return list(store.rollup_minutes_in(lo, hi).exclude(Exists(attributed)).values_list("device_id", "bucket"))


# -- writing ------------------------------------------------------------------------


_COPY_COLUMNS = ("device_id", "minute", "job_id", "team", "held_s", "device_s", "energy_j", "energy_from",
                 "rollup_samples", "rollup_covered_s", "rollup_energy_j", "energy_scope")


def _allocate(rollups, stints, teams):
    """Allocation row tuples (in _COPY_COLUMNS order) for `rollups` given `stints` ({device: [(job, start, end)]}) and `teams` ({job: team})."""
    out = []
    for device_id, bucket, samples, covered_s, energy_j, energy_from, owner, energy_scope in rollups:
        end_of_minute = bucket + MINUTE
        overlapping = [s for s in stints.get(device_id, ()) if s[1] < end_of_minute and s[2] > bucket]
        if not overlapping or (len(overlapping) == 1 and overlapping[0][1] <= bucket
                               and overlapping[0][2] >= end_of_minute):
            # Idle all minute, or one job's all minute (most minutes of a fleet): split_minute's own result
            # (the whole rollup to that one holder, exactly), without its arithmetic.
            job_id = overlapping[0][0] if overlapping else None
            out.append((device_id, bucket, job_id, owner if job_id is None else teams.get(job_id, IDLE_TEAM),
                        60.0, _dec(covered_s), _dec(energy_j), energy_from, samples, covered_s, energy_j,
                        energy_scope))
            continue
        holds = defaultdict(list)
        for job_id, start, end in overlapping:
            holds[job_id].append((_seconds(max(start, bucket) - bucket), _seconds(min(end, end_of_minute) - bucket)))
        for job_id, held_s, dev_s, joules in split_minute(covered_s, energy_j, holds):
            out.append((device_id, bucket, job_id, owner if job_id is None else teams.get(job_id, IDLE_TEAM),
                        held_s, dev_s, joules, energy_from, samples, covered_s, energy_j, energy_scope))
    return out


_GONE = ("WITH gone AS (DELETE FROM costs_allocation a {} RETURNING a.job_id) "
         "SELECT DISTINCT job_id FROM gone WHERE job_id IS NOT NULL")
_GONE_PAIRS = _GONE.format("USING unnest(%s::int4[], %s::timestamptz[]) AS p(device_id, minute) "
                           "WHERE a.device_id = p.device_id AND a.minute = p.minute")
_GONE_MINUTES = _GONE.format("WHERE a.minute >= %s AND a.minute < %s AND a.minute = ANY(%s::timestamptz[])")


def _replace(rollups, now, touched, whole=False):
    """Recompute and replace the allocation rows of the given rollup minutes; return rows written.

    `whole`: `rollups` are every rollup of their minutes, so those minutes' allocations are deleted by the
    minute index instead of pair by pair (a minute of 100,000 GPUs: two arrays of 100,000 to send and join).
    A minute without rollups (past their retention) keeps its allocations either way. Adds to `touched`
    the jobs whose rows were replaced: those charged now and those that lost rows (a stint cut back to a
    crashed worker's last heartbeat)."""
    rollups = _unfolded(rollups)
    if not rollups:
        return 0
    lo = min(r[1] for r in rollups)
    hi = max(r[1] for r in rollups) + MINUTE
    stints = _stints(lo, hi, now)
    job_ids = {s[0] for per in stints.values() for s in per}
    teams = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "team"))
    rows = _allocate(rollups, stints, teams)
    with connection.cursor() as cur:
        if whole:
            cur.execute(_GONE_MINUTES, [lo, hi, sorted({r[1] for r in rollups})])
        else:
            cur.execute(_GONE_PAIRS, [[r[0] for r in rollups], [r[1] for r in rollups]])
        touched.update(job_id for (job_id,) in cur.fetchall())
        touched.update(r[2] for r in rows if r[2] is not None)
        # COPY, not bulk_create: about 4x faster for the thousands of rows of a run.
        with cur.cursor.copy(f"COPY costs_allocation ({', '.join(_COPY_COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    return len(rows)


def _unfolded(rollups):
    """The `rollups` of minutes not folded: a day past the horizon keeps the sums it was folded with (costs/fold.py),
    and a late sample for it is not charged, saying why."""
    before = fold.folded_before()
    if before is None or not rollups:
        return rollups
    edge = fold.midnight(before)
    kept = [r for r in rollups if r[1] >= edge]
    if len(kept) < len(rollups):
        log.warning("%d device-minutes of telemetry before %s not charged: %s", len(rollups) - len(kept), before,
                    FOLDED_WHY)
    return kept


FOLDED_WHY = ("the allocations of those days are folded into one row per device, job and day "
              "(YARDSTICK_ALLOCATION_1M_DAYS) and keep the figures they were folded with")


def attribute_range(lo, hi, now=None, touched=None):
    """Recompute every rollup minute in [lo, hi); return the number of allocation rows written.

    `touched` (a set), when given, gets the ids of the jobs whose rows changed."""
    now = now or timezone.now()
    touched = set() if touched is None else touched
    written = 0
    start = lo
    while start < hi:
        end = min(hi, start + CHUNK)
        with transaction.atomic():
            written += _replace(_rollups(start, end), now, touched, whole=True)
        start = end
    return written


def attribute_window(lo, hi, now=None):
    """Recompute the closed minutes in [lo, hi) now (telemetry just imported from further back than
    the periodic run looks); serialised with `attribute` by the same row lock. Return a summary dict
    {"from", "to", "rows"}."""
    now = now or timezone.now()
    lo, hi = floor_minute(lo), min(hi, floor_minute(now))
    with transaction.atomic():
        state, _ = AttributionState.objects.select_for_update().get_or_create(id=1)
        rows = attribute_range(lo, hi, now) if lo < hi else 0
        edge = fold.midnight(state.folded_before) if state.folded_before else None
        refused = len(_rollups(lo, min(hi, edge))) if edge and lo < min(hi, edge) else 0
    summary = {"from": lo, "to": hi, "rows": rows}
    if refused:
        summary["refused"] = f"{refused} device-minutes before {state.folded_before} not charged: {FOLDED_WHY}"
    return summary


def _changed_stints(state, since):
    """{device id: first minute to recompute} for the stints that changed since the last run (the module
    docstring says which), minutes before `state.done_through` only (later ones are new minutes anyway)."""
    done = state.done_through
    changes = [*Stint.objects.filter(pk__in=state.open_stints, ended_at__isnull=False)
               .values_list("node", "device", "ended_at"),
               *Stint.objects.filter(pk__gt=state.last_stint_id).values_list("node", "device", "started_at")]
    seen = set(state.recent_stints) | set(state.open_stints)
    for pk, node, device, start, end in _recent_stints(since).values_list("pk", "node", "device", "started_at",
                                                                          "ended_at"):
        if pk <= state.last_stint_id and pk not in seen:  # committed after the last run read newer ones
            changes.append((node, device, max(since, min(t for t in (start, end) if t is not None and t >= since))))
    gpus = store.device_ids({device for _, device, _ in changes if device != "cpu"})
    hosts = store.host_device_ids({node for node, device, _ in changes if device == "cpu"})
    redo = {}
    for node, device, ts in changes:
        minute = floor_minute(ts)
        if minute >= done:
            continue
        for device_id in hosts.get(node, []) if device == "cpu" else [gpus[device]] if device in gpus else []:
            redo[device_id] = min(minute, redo.get(device_id, minute))
    return redo


def _recent_stints(since):
    """The stints that started or ended at or after `since`."""
    return Stint.objects.filter(Q(started_at__gte=since) | Q(ended_at__gte=since))


def _changed_since(snapshot, lo, hi):
    """(device, minute) pairs in [lo, hi) whose rollup was written since `snapshot` and has no allocation or
    changed since it was attributed: collector.store.rollups_written_since, less the minutes whose rows hold
    the rollup's figures."""
    attributed = Allocation.objects.filter(
        device_id=OuterRef("device_id"), minute=OuterRef("bucket"), rollup_samples=OuterRef("samples"),
        rollup_covered_s=OuterRef("covered_s"), rollup_energy_j=OuterRef("energy_j"))
    return list(store.rollups_written_since(snapshot, lo, hi).exclude(Exists(attributed))
                .values_list("device_id", "bucket"))


def _replace_devices(devices_from, hi, now, touched):
    """Recompute the minutes of `devices_from` ({device id: first minute}) before `hi`, a CHUNK at a time."""
    written = 0
    start = min(devices_from.values(), default=hi)
    while start < hi:
        end = min(hi, start + CHUNK)
        written += _replace(_rollups_from(devices_from, start, end), now, touched)
        start = end
    return written


def _rollups_from(devices_from, lo, hi):
    return [(*r[:6], r[6] or IDLE_TEAM, r[7]) for r in store.rollup_minutes(lo, hi, devices_from=devices_from)]


def attribute(now=None, since=None):
    """Attribute the closed minutes that are new or changed since the last run; return a summary dict:
    {"from", "to", "late_minutes", "rows", "jobs": ids of the jobs whose allocations were replaced}.

    `since` (an aware datetime) recomputes everything from then on (backfill).
    Serialised by a row lock on the state, so two workers never interleave.
    """
    now = now or timezone.now()
    closed_before = floor_minute(now)
    with transaction.atomic():
        state, _ = AttributionState.objects.select_for_update().get_or_create(id=1)
        # Before any read: what is written after this, the next run reads. So are the stints.
        seen = store.rollup_snapshot()
        open_stints = list(Stint.objects.filter(ended_at__isnull=True).values_list("pk", flat=True))
        last_stint_id = Stint.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        # The next run's lookback starts LOOKBACK before this run's end (its done_through).
        recent_stints = list(_recent_stints(closed_before - LOOKBACK).filter(ended_at__isnull=False)
                             .values_list("pk", flat=True))
        late, redo = [], {}
        if since is not None:
            lo = floor_minute(since)
        elif state.done_through is None:
            lo = store.oldest_rollup_minute() or closed_before
        elif state.rollups_seen is None:  # the first run with the snapshot: as every run did before it
            lo = state.done_through - LOOKBACK
            ended = Stint.objects.filter(pk__in=state.open_stints, ended_at__isnull=False).values_list("ended_at", flat=True)
            started = Stint.objects.filter(pk__gt=state.last_stint_id).values_list("started_at", flat=True)
            for ts in [*ended, *started]:
                lo = min(lo, floor_minute(ts))
            late = _changed_minutes(min(lo, closed_before) - LATE_WINDOW, min(lo, closed_before))
        else:
            lo = state.done_through
            redo = _changed_stints(state, lo - LOOKBACK)
            late = [(d, m) for d, m in _changed_since(state.rollups_seen, lo - LATE_WINDOW, lo)
                    if not (d in redo and m >= redo[d])]
        lo = min(lo, closed_before)

        written = 0
        touched = set()
        for i in range(0, len(late), 20000):
            written += _replace(_rollups(None, None, pairs=late[i:i + 20000]), now, touched)
        written += _replace_devices(redo, lo, now, touched)
        written += attribute_range(lo, closed_before, now, touched)

        state.done_through = max(closed_before, state.done_through or closed_before)
        state.open_stints = open_stints
        state.recent_stints = recent_stints
        state.last_stint_id = last_stint_id
        state.rollups_seen = seen
        state.ran_at = now
        state.save()
    return {"from": lo, "to": closed_before, "late_minutes": len(late), "rows": written, "jobs": sorted(touched)}

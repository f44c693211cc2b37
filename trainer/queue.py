"""The line of jobs waiting for devices on the nodes' own workers, and the one placer that gives them out.

A job of a kind that waits (`Kind.wants(job)` is not None: a recipe launched on a node's launch worker, a built-in
job that trains on GPUs) joins the line when it is started or resumed: queued, `queued_at` set, `placed_at` empty.
`place_waiting` is the placer: one pass, under a PostgreSQL advisory lock (one pass at a time, in any process), over
the line in order of priority (high, normal, low), then of when each job joined, then of id. Each job is given what
it wants out of what no job holds on a node (trainer.workers.free_devices: GPUs by NVML index less what every kind's
jobs hold there: a node's jobs worker and launch worker give out the same GPUs), on the live worker of its kind,
pool and node with the most free, and sent there (`Kind.place_at`); what does not fit waits, saying what for and its
place among the waiting jobs of its pool ("waiting for 2 × GPUs in the shared pool: 1st in line (...)").

No starving: a GPU job that does not fit holds back the free GPUs of the node where it will fit soonest (of those
whose worker has enough GPUs for it, the one with the most free): no job behind it in the line is given those, so
they gather until it fits, while jobs behind it may still start on other nodes. A job of higher priority comes before
it in the line and is served first. A cpu job shares its node's cores (as many as the worker has) and never waits
for them.

Team caps (trainer.models.TeamCap): a job whose team's placed jobs already hold its team's cap of GPUs waits, saying
so, and holds nothing back for itself.

A pass runs when a job joins the line, when a job ends (trainer.signals.devices_freed, after the commit: what it held
is free), when a waiting job's priority or a cap changes, when a worker reports, and from beat every
settings.QUEUE_PASS_S (a worker that came back, a control plane restarted). Everything is in the database: a restart
loses no place.
"""

import heapq
import logging
import math
import statistics
from collections import Counter
from dataclasses import dataclass

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from trainer import inputs
from trainer.kinds import kind_of, kinds
from trainer.models import ACTIVE, TEAM_MAX, Job, Status, TeamCap
from trainer.workers import free_devices, gpu_indices, held_on_nodes, live_workers
from yardstick.inputs import InputError
from yardstick.live import publish

log = logging.getLogger(__name__)

# pg_advisory_xact_lock's key: one placer pass at a time, across every process of the control plane and the nodes.
LOCK_KEY = 0x59_53_51_55  # "YSQU"
CAP_MAX = 100_000
# What a pass reads of each waiting job (a kind's place_at or status note reads more only of the jobs it places).
LINE_FIELDS = ("id", "source", "status", "team", "pool", "node", "device", "devices", "priority", "queued_at",
               "placed_at", "placed_on", "waiting_for", "line_place", "gpus")


@dataclass(frozen=True)
class Want:
    """What a waiting job asks for: `count` devices of `kind` ("cuda": GPUs, one job each; "cpu": cores, shared) on
    `node` (empty: any) in `pool` (empty: the shared workers)."""

    kind: str
    count: int
    node: str = ""
    pool: str = ""
    index: int | None = None  # that GPU (NVML index) and no other: a built-in job's cuda:N

    def __str__(self):
        what = "GPU" if self.kind == "cuda" else "core"
        where = (f" on node {self.node}" if self.node else "") + (f" in pool {self.pool}" if self.pool
                                                                   else " in the shared pool")
        if self.index is not None:
            return f"GPU {self.index}{where}"
        return f"{self.count} × {what}{'s' if self.count > 1 else ''}{where}"

    def fits(self, free):
        """The GPUs of `free` (indices) it would be given, or None."""
        if self.index is not None:
            return [self.index] if self.index in free else None
        return free[:self.count] if len(free) >= self.count else None


def waiting():
    """The line: the jobs waiting for devices, first to be served first."""
    return Job.objects.filter(status=Status.QUEUED, queued_at__isnull=False, placed_at__isnull=True).order_by(
        "-priority", "queued_at", "pk")


def ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass
class Pass:
    placed: list  # the jobs given devices, in the order they were served
    waiting: list  # the jobs left in line, in order


def place_waiting(now=None):
    """One pass of the placer over the line (see the module docstring); return the Pass. Runs in the caller's
    transaction if there is one (the lock is held until it commits), else in its own."""
    now = now or timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        line = list(waiting().only(*LINE_FIELDS))
        if not line:
            return Pass([], [])
        wants = _wants(line)
        fleet = _Fleet(live_workers(now))
        caps, team_held = _caps()
        places = Counter()
        done = Pass([], [])
        changed = []
        for job in line:
            kind, want = kind_of(job), wants[job.pk]
            if want is None:  # a kind that stopped waiting (should not be in line): placed as its kind places
                continue
            group = fleet.group(kind, want.pool)
            big_enough = group.big_enough(want)
            cap = caps.get((job.team, want.kind))
            over_cap = cap is not None and team_held[(job.team, want.kind)] + want.count > cap
            if not over_cap:
                chosen = group.best(want)
                if chosen is not None:
                    given = fleet.take(chosen.host, want)
                    team_held[(job.team, want.kind)] += want.count
                    Job.objects.filter(pk=job.pk).update(placed_at=now, placed_on=chosen.name, line_place=None)
                    job.placed_at, job.placed_on, job.line_place = now, chosen.name, None
                    kind.place_at(job, chosen, given, want.count if want.kind == "cpu" else 0)
                    done.placed.append(job)
                    continue
                if want.kind == "cuda" and big_enough:
                    fleet.hold_back(group.soonest(want))
            places[want.pool] += 1
            if over_cap:
                why = (f"team {job.team} holds {team_held[(job.team, want.kind)]} of its cap of {cap} "
                       f"{'GPU' if want.kind == 'cuda' else 'core'}{'s' if cap != 1 else ''}")
            elif big_enough:
                why = "every GPU that would do is held" if want.kind == "cuda" else "the cores are held"
            elif group.serves(want):
                why = f"no live worker there has {want.count} now"
            else:
                why = "no live worker serves it now"
            text = f"waiting for {want}: {ordinal(places[want.pool])} in line ({why})"
            if (job.waiting_for, job.line_place) != (text, places[want.pool]):
                job.waiting_for, job.line_place = text, places[want.pool]
                changed.append(job)
            done.waiting.append(job)
        if changed:  # one statement a row, pipelined (an UPDATE of a thousand CASEs took longer)
            with connection.cursor() as cursor:
                cursor.executemany(f"UPDATE {Job._meta.db_table} SET waiting_for = %s, line_place = %s WHERE id = %s",
                                   [(j.waiting_for, j.line_place, j.pk) for j in changed])
        moved = done.placed + changed
        transaction.on_commit(lambda: _announce(moved))
    return done


def _wants(jobs):
    """{job id: Want or None}, each kind asked once for its jobs."""
    by_source = {}
    for job in jobs:
        by_source.setdefault(job.source, []).append(job)
    out = {}
    for source_jobs in by_source.values():
        out.update(kind_of(source_jobs[0]).wants_all(source_jobs))
    return out


class _Fleet:
    """The live workers of one pass, by node: each node's free GPUs (indices) and cores, once for all its workers
    (what every kind holds there taken out), the nodes held back for a job ahead, and the workers grouped by the kind
    of job they run and their pool."""

    def __init__(self, workers):
        workers = sorted(workers, key=lambda w: w.name)
        self.workers = workers
        held = held_on_nodes(workers)
        self.free = {}
        self.size = {}
        for w in workers:
            if w.host not in self.free:
                self.free[w.host] = list(free_devices(w, held[w.host]))
                self.size[w.host] = len(gpu_indices(w))
        self.version = Counter()  # a node's free changed: its heap entries of before are stale
        self.held_back = set()
        self.groups = {}

    def group(self, kind, pool):
        key = (kind.source, pool)
        if key not in self.groups:
            self.groups[key] = _Group(self, [w for w in self.workers if w.team == pool and kind.runs_on(w)])
        return self.groups[key]

    def take(self, host, want):
        """Give `want` its devices on `host`: the GPUs, by index ([] for a cpu job, whose cores are shared)."""
        gpus, cores = self.free[host]
        given = want.fits(gpus) if want.kind == "cuda" else []
        self.free[host] = [[i for i in gpus if i not in given], cores - (want.count if want.kind == "cpu" else 0)]
        self.version[host] += 1
        return given

    def hold_back(self, host):
        if host is not None:
            self.held_back.add(host)


class _Group:
    """The workers of one kind of job in one pool (a node's worker of that kind stands for the node): the nodes in a
    heap by most free GPUs (then the worker's name), stale entries skipped as they come up."""

    def __init__(self, fleet, workers):
        self.fleet = fleet
        self.by_host = {}
        for w in workers:
            self.by_host.setdefault(w.host, w)  # sorted by name: the first of the node's workers of this kind
        self.heap = [self._entry(host) for host in self.by_host]
        heapq.heapify(self.heap)
        self.largest = max((fleet.size[h] for h in self.by_host), default=0)
        self.cores = max((w.cores for w in self.by_host.values()), default=0)

    def _entry(self, host):
        fleet = self.fleet
        return (-len(fleet.free[host][0]), self.by_host[host].name, host, fleet.version[host])

    def _top(self):
        """The node with the most free GPUs that is not held back, or None; refreshes what changed since."""
        fleet = self.fleet
        while self.heap:
            _free, _name, host, version = self.heap[0]
            if host in fleet.held_back:
                heapq.heappop(self.heap)
            elif version != fleet.version[host]:
                heapq.heapreplace(self.heap, self._entry(host))
            else:
                return host
        return None

    def _hosts(self, want):
        """The nodes `want` may go to: its node, or all the group's."""
        if want.node:
            return [want.node] if want.node in self.by_host else []
        return None

    def serves(self, want):
        return bool(self.by_host) and self._hosts(want) != []

    def big_enough(self, want):
        """Whether a node of the group could ever fit `want` (however busy now)."""
        hosts = self._hosts(want)
        if want.kind == "cpu":
            return any(self.by_host[h].cores >= want.count for h in (hosts if hosts is not None else self.by_host))
        if want.index is not None:
            return any(want.index in gpu_indices(self.by_host[h]) for h in (hosts if hosts is not None
                                                                             else self.by_host))
        if hosts is not None:
            return any(self.fleet.size[h] >= want.count for h in hosts)
        return self.largest >= want.count

    def best(self, want):
        """The worker `want` is given its devices on now (the most free GPUs, then the name), or None."""
        fleet = self.fleet
        hosts = self._hosts(want)
        if want.kind == "cpu":  # cores are shared: the node with the most free of those that have enough
            fits = [h for h in (hosts if hosts is not None else self.by_host) if self.by_host[h].cores >= want.count]
            return self.by_host[min(fits, key=lambda h: (-fleet.free[h][1], self.by_host[h].name))] if fits else None
        if hosts is not None or want.index is not None:
            fits = [h for h in (hosts if hosts is not None else self.by_host)
                    if h not in fleet.held_back and want.fits(fleet.free[h][0]) is not None]
            return self.by_host[min(fits, key=lambda h: (-len(fleet.free[h][0]), self.by_host[h].name))] \
                if fits else None
        host = self._top()
        return self.by_host[host] if host is not None and want.fits(fleet.free[host][0]) is not None else None

    def soonest(self, want):
        """The node a GPU job that does not fit now will fit on soonest: of those with enough GPUs and not held back,
        the one with the most free (then the worker's name); None when it is held back already."""
        fleet = self.fleet
        host = self._top() if want.node == "" and want.index is None else None
        if host is not None and fleet.size[host] >= want.count:
            return host
        hosts = self._hosts(want)
        able = [h for h in (hosts if hosts is not None else self.by_host) if h not in fleet.held_back
                and fleet.size[h] >= want.count and (want.index is None or want.index in gpu_indices(self.by_host[h]))]
        return min(able, key=lambda h: (-len(fleet.free[h][0]), self.by_host[h].name)) if able else None


def _caps():
    """({(team, kind): cap}, Counter of (team, kind): devices its live placed jobs hold)."""
    caps = {(c.team, c.kind): c.devices for c in TeamCap.objects.all()}
    held = Counter()
    if caps:
        teams = {team for team, _kind in caps}
        placed = list(Job.objects.filter(team__in=teams, status__in=[Status.QUEUED, *ACTIVE]).exclude(
            queued_at__isnull=False, placed_at__isnull=True))
        wants = _wants(placed)
        for job in placed:
            want = wants[job.pk]
            if want is not None:
                held[(job.team, want.kind)] += want.count
    return caps, held


def _announce(jobs):
    """The Jobs list and the queue panel follow the line: each moved job's note, then a "queue" event."""
    publish("jobs", "queue", {"jobs": [{"id": j.pk, "in_line": j.placed_at is None, "line_place": j.line_place,
                                         "note": j.status_note} for j in jobs]})


def on_devices_freed(sender=None, job=None, **kwargs):
    """trainer.signals.devices_freed's receiver: a pass when anyone waits."""
    serve_waiting()


def set_priority(job, priority, by=None):
    """Change waiting `job`'s priority ("low", "normal", "high"; high for admins: `by`, the user asking, None for
    Yardstick itself), then a pass: its place follows. InputError when the value is not one, the user may not ask
    for it, or the job no longer waits."""
    value = inputs.priority(priority, by)
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, status=Status.QUEUED, queued_at__isnull=False,
                                  placed_at__isnull=True).update(priority=value):
            job.refresh_from_db()
            raise InputError("priority", f"job {job.pk} is {job.status}, not waiting in line: only a waiting job's "
                                         "priority can change")
        place_waiting()
    job.refresh_from_db()
    return job


def set_cap(team, kind, devices, by=""):
    """Set `team`'s cap of `kind` ("cuda": GPUs, "cpu": cores) to `devices` held at once, or remove it (None or
    empty), then a pass (a raised cap may start what waited for it); the TeamCap or None. InputError naming the bad
    field; nothing changes then."""
    team = inputs.text("team", team, TEAM_MAX)
    if not isinstance(kind, str) or kind not in TeamCap.KINDS:
        raise InputError("kind", f"kind must be cuda (GPUs) or cpu (cores), got {kind!r}")
    if devices is None or (isinstance(devices, str) and not devices.strip()):
        TeamCap.objects.filter(team=team, kind=kind).delete()
        serve_waiting()
        return None
    number = -1
    if isinstance(devices, int) and not isinstance(devices, bool):
        number = devices
    elif isinstance(devices, str) and devices.strip().isascii() and devices.strip().isdigit():
        number = int(devices.strip())
    if not 0 <= number <= CAP_MAX:
        raise InputError("devices", f"devices must be a whole number from 0 to {CAP_MAX} (empty: no cap), got "
                                    f"{devices!r}")
    cap, _ = TeamCap.objects.update_or_create(team=team, kind=kind, defaults={"devices": number, "set_by": str(by),
                                                                               "set_at": timezone.now()})
    serve_waiting()
    return cap


def serve_waiting():
    """A pass when anyone waits (after the commit that ended a job, when a worker reports); an error is logged, never
    raised into what called it (beat's pass comes next). Return the Pass, or None."""
    try:
        if waiting().exists():
            return place_waiting()
    except DatabaseError as err:
        log.warning("the placer's pass failed: %s", err)
    return None


def summary(now=None):
    """The line as the queue panel and /api/queue show it: per pool (the shared one is ""), its workers' GPUs (all,
    free, held), the jobs running that the line placed and those placed but not started yet, the waiting ones in order (the first is the next to start);
    and the team caps."""
    now = now or timezone.now()
    pools = {}

    def pool(name):
        return pools.setdefault(name, {"pool": name, "workers": [], "gpus": 0, "free_gpus": 0, "held_gpus": 0,
                                       "cores": 0, "running": 0, "starting": 0, "waiting": []})

    counted = set()  # (pool, node): a node's jobs worker and launch worker share its GPUs
    workers = [w for w in sorted(live_workers(now), key=lambda w: w.name) if any(k.runs_on(w) for k in kinds())]
    held = held_on_nodes(workers)
    for worker in workers:
        row = pool(worker.team)
        row["workers"].append(worker.name)
        if (worker.team, worker.host) in counted:
            continue
        counted.add((worker.team, worker.host))
        free_gpus, _cores = free_devices(worker, held[worker.host])
        row["gpus"] += len(gpu_indices(worker))
        row["free_gpus"] += len(free_gpus)
        row["held_gpus"] += len(gpu_indices(worker)) - len(free_gpus)
        row["cores"] += worker.cores
    # Placed by the line: running (or stopping), or given its devices and sent to its worker but not started yet
    # ("starting": a worker busy with its last run, or restarting). Counted apart: one running and one sent is not
    # "Running 2".
    placed = Job.objects.filter(status__in=[Status.QUEUED, *ACTIVE], queued_at__isnull=False,
                                placed_at__isnull=False)
    for (name, status), count in Counter(placed.values_list("pool", "status")).items():
        pool(name)["starting" if status == Status.QUEUED else "running"] += count
    line = list(waiting())
    wants = _wants(line)
    for job in line:
        want = wants[job.pk]
        pool(job.pool)["waiting"].append({
            "id": job.pk, "name": job.name, "team": job.team, "priority": job.get_priority_display(),
            "place": job.line_place, "wants": str(want) if want else "", "waiting_for": job.waiting_for,
            "queued_at": job.queued_at.isoformat(), "waited_s": round(job.waited_s(now), 3)})
    rows = [pools[name] for name in sorted(pools)]
    for row in rows:
        row["next"] = row["waiting"][0] if row["waiting"] else None
    return {"pools": rows, "waiting": sum(len(r["waiting"]) for r in rows), "gpus": sum(r["gpus"] for r in rows),
            "caps": [cap.to_dict() for cap in TeamCap.objects.all()]}


def p90(values):
    """The 90th percentile by nearest rank: the smallest value with at least 90 % of them at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def waits(start, end, now=None):
    """Per team, how long the jobs that joined the line in [start, end) waited in it for their devices (placed_at -
    queued_at; a job still waiting: so far, and counted as waiting): [{team, jobs, waiting_now, median_s, p90_s,
    longest_s, caps}], teams by name. Jobs that never wait in the line (cpu jobs, a cluster's, outside runs) and jobs
    cancelled while waiting are not counted; docs/figures.md defines each figure."""
    now = now or timezone.now()
    jobs = list(Job.objects.filter(queued_at__gte=start, queued_at__lt=end).only(*LINE_FIELDS))
    wants = _wants(jobs)
    by_team = {}
    for job in jobs:
        want = wants[job.pk]
        if want is None or want.kind == "cpu" or (job.placed_at is None and job.status != Status.QUEUED):
            continue  # no wait for GPUs: a cpu launch shares cores (it passes through the line, never waits long)
        by_team.setdefault(job.team, []).append((job.waited_s(now), job.placed_at is None))
    caps = {}
    for cap in TeamCap.objects.all():
        caps.setdefault(cap.team, []).append(cap.to_dict())
    out = []
    for team in sorted(set(by_team) | set(caps)):
        seconds = [s for s, _waiting in by_team.get(team, [])]
        out.append({"team": team, "jobs": len(seconds), "waiting_now": sum(w for _s, w in by_team.get(team, [])),
                    "median_s": statistics.median(seconds) if seconds else None,
                    "p90_s": p90(seconds) if seconds else None, "longest_s": max(seconds) if seconds else None,
                    "caps": caps.get(team, [])})
    return out

"""Launched jobs: a recipe's command, started by Yardstick on a node's launch worker.

An operator picks a recipe and fills its parameters; `start` checks every value (launch/params.py), places the
job on a live launch worker with enough free devices of the kind the recipe asks for (`place`: GPUs out of the
worker's free ones, or cores), creates the queued job, its `Launch` (the recipe version, the values) and the
MLflow run the command will report into, and sends it to that worker's own queue after commit. The worker
(launch/executor.py) claims it, starts the argv as its own process group with the run's variables, streams its
output here, and ends the job from its exit status, or from the stop steps that ended it.

A launched job is a job like the others: its metrics arrive through the tracking API (its MLflow run), its
stints come from the devices its worker gave it, and budget, stop-loss and campaigns act on it through the
same Job methods. Registered with trainer's kinds from launch/apps.py.
"""

import re
from dataclasses import dataclass, field
from datetime import timedelta

from celery import current_app
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from launch.executors import Executor, executor_named
from launch.models import Cluster, Launch, Recipe, names_init_from
from launch.params import Param, ParamError
from tracking import matching
from tracking import store as tracking_store
from tracking.models import Stage, TrackingError
from trainer import inputs, stoploss
from trainer.kinds import Kind
from trainer.models import ACTIVE, ENV_MAX, NAME_MAX, TEAM_MAX, Job, Source, Status, Stint, Worker
from trainer.queue import Want, place_waiting
from trainer.workers import LAUNCH_PREFIX, Placement, describe
from yardstick.inputs import InputError
from yardstick.models import ApiToken

RUN_LAUNCH = "launch.tasks.run_launch"
# A launch worker's Celery name and own queue: "launch@<node>" (yardstick/runner.py starts one with the jobs role).
QUEUE_PREFIX = LAUNCH_PREFIX
LIVE = (Status.QUEUED, *ACTIVE)
# The checkpoint folders of the frameworks, newest = highest N: transformers and TRL, veRL, NeMo RL.
CHECKPOINT_PATTERNS = (r"checkpoint-(\d+)", r"global_step_(\d+)", r"step_(\d+)")
# A recipe parameter of one of these names is the run's total steps, its progress's "of N" from the start (the total
# a run logs itself, tracking.store.STEPS_PARAMS, replaces it): transformers/TRL and NeMo RL, veRL, a plain script.
RECIPE_STEPS_PARAMS = ("max_steps", "total_training_steps", "max_num_steps", "steps")


def launch_workers(now=None):
    """The live launch workers (trainer.models.Worker rows named launch@<node>)."""
    return list(Worker.live(now=now).filter(name__startswith=QUEUE_PREFIX))


class Launched(Kind):
    source = Source.LAUNCHED
    holds_policy = False  # its checkpoints are its framework's, on its node: evaluation recipes score them
    worker_beats = True  # the launch worker beats while the command runs

    def badge(self, job):
        launch = _launch(job)
        if launch is None:
            return ("launched", "started by Yardstick from a recipe")
        framework = f" ({launch.definition.get('framework')})" if launch.definition.get("framework") else ""
        return (f"launched · {launch.recipe_name}",
                f"started by Yardstick from recipe {launch.recipe_name} v{launch.recipe_version}{framework}")

    def start(self, **fields):
        return start(**fields)

    def placement(self, job):
        launch = job.launch
        return executor_named(launch.executor).place(launch.definition, node=job.node, pool=job.pool,
                                                     cluster=launch.cluster, job=job)

    def dispatch(self, job, placement):
        executor_named(job.launch.executor).dispatch(job, placement)

    def worker_started(self, worker):
        return requeue_orphans(worker=worker)

    def wants(self, job):
        return self.wants_all([job])[job.pk]

    def wants_all(self, jobs):
        # A node's launch worker's job waits in the line for its devices (the job's device and devices are its
        # recipe's); a cluster's waits in its scheduler's. Read of the launches: only those the job alone does not
        # tell (a cluster's; a Resume, which goes where its checkpoints are: the job's output directory is there).
        ids = [j.pk for j in jobs]
        other = dict(Launch.objects.filter(pk__in=ids).exclude(executor=NODE.name, checkpoints=[]).values_list(
            "pk", "executor"))
        ran_on = dict(Launch.objects.filter(pk__in=list(other)).values_list("pk", "node")) if other else {}
        out = {}
        for job in jobs:
            if other.get(job.pk, NODE.name) != NODE.name:
                out[job.pk] = None
                continue
            out[job.pk] = Want(job.device, job.devices, job.node or ran_on.get(job.pk, ""), job.pool)
        return out

    def runs_on(self, worker):
        return worker.name.startswith(QUEUE_PREFIX)

    def joined_line(self, job, now):
        place_waiting(now)

    def place_at(self, job, worker, gpus, cores):
        NODE.dispatch(job, LaunchPlacement(worker.name, worker.name, node=worker.host, gpus=gpus, cores=cores))

    def resume_refusal(self, job):
        launch = _launch(job)
        if launch is not None and launch.unreachable_since is not None and launch.cluster_id is not None:
            # Its scheduler's job may still run there: a second start would run beside it.
            return (f"its {launch.executor} job {launch.remote_id} may still run on cluster {launch.cluster.name}, "
                    f"which has not answered since {launch.unreachable_since:%Y-%m-%d %H:%M:%S} UTC: Resume once "
                    "the cluster answers and Yardstick has taken its word")
        if launch is not None and not launch.definition.get("resume_argv"):
            return (f"job {job.pk}'s recipe {launch.recipe_name} gives no resume arguments: Restart starts it again "
                    "from the beginning")
        if launch is not None and not launch.checkpoints:
            return (f"job {job.pk} has no checkpoint in its output directory: Restart starts it again from the "
                    "beginning")
        return ""

    def status_note(self, job):
        # A job on a cluster that does not answer runs (or ran) there as far as anyone knows: say so, and since when.
        launch = _launch(job)
        if launch is None or launch.unreachable_since is None or launch.cluster_id is None:
            return ""
        since = f"cluster {launch.cluster.name} not answering since {launch.unreachable_since:%Y-%m-%d %H:%M:%S} UTC"
        return since if job.status in LIVE else f"{since}: its {launch.executor} job may still run there"

    def unmeasured(self, job_ids):
        """Those of `job_ids` launched on a cluster whose allocation names a node no agent measures (the follower
        ties them: launch.remote.measured_where), with the nodes."""
        out = {}
        rows = Launch.objects.filter(pk__in=list(job_ids), allocation__isnull=False)
        for job_id, executor, allocation, status in rows.values_list("pk", "executor", "allocation", "job__status"):
            hosts = allocation.get("hosts") or [allocation.get("nodes", "")]
            tied = allocation.get("yardstick_nodes")
            if tied is None:  # recorded before the follower tied nodes: not known
                continue
            blind = [host for host, node in zip(hosts, tied) if node is None]
            if blind:
                out[job_id] = (f"no Yardstick agent reports from {executor} node{'s' if len(blind) > 1 else ''} "
                               f"{', '.join(blind)}, where it {'runs' if status in LIVE else 'ran'}: start one there "
                               "(manage.py collect, or up --role collector) to measure what its jobs cost")
        return out

    def checkpoint_steps(self, job):
        launch = _launch(job)
        return sorted({step for step, _name in checkpoint_names(launch.checkpoints, launch.definition)}) \
            if launch else []

    def held_on(self, workers):
        return NODE.held_on(workers)

    def beating(self):
        # A cluster's job has no Yardstick worker to beat for it: its follower reconciles it with the scheduler.
        return Q(launch__executor=NODE.name)


LAUNCHED = Launched()


class NodeExecutor(Executor):
    """A GPU node's launch worker runs the job (launch/executor.py): its jobs wait in the line (trainer/queue.py),
    which gives them free devices and sends each to its worker's own queue."""

    name = "node"

    def place(self, definition, *, node="", pool="", cluster=None, job=None):
        if job is not None and not node and job.launch.checkpoints:
            node = job.launch.node  # a Resume goes where its checkpoints are: the job's output directory is there
        refusal(definition["devices"], node, pool)  # what no live worker could ever run, however long it waited
        return None

    def dispatch(self, job, placement):
        # What the placement gave the job is held from now: the next placement sees it taken.
        Launch.objects.filter(pk=job.pk).update(worker=placement.worker, node=placement.node, gpus=placement.gpus,
                                                cores=placement.cores)
        job_id, queue = job.pk, placement.queue
        transaction.on_commit(lambda: current_app.send_task(RUN_LAUNCH, args=[job_id], queue=queue))

    def held_on(self, workers):
        """{node: {"gpus": {index: job id}, "cores": {job id: cores}}} of the live launches on the nodes of `workers`:
        by node (the node's jobs worker must not give them out either); a job waiting in the line holds nothing,
        whatever its last start was given."""
        out = {w.host: {"gpus": {}, "cores": {}} for w in workers}
        # Per node, in one row: the GPUs held and their jobs as integer arrays (a fleet's worth of JSON lists, read
        # and decoded one launch at a time, took most of a placer's pass), then the cores of cpu launches. Every
        # node's: matching each row's node against a thousand names cost more than the nodes not asked for.
        launch, job = Launch._meta.db_table, Job._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT l.node, array_agg(g.value::int), array_agg(l.job_id) FROM {launch} l JOIN {job} j ON j.id = "
                f"l.job_id CROSS JOIN LATERAL jsonb_array_elements_text(l.gpus) g WHERE l.executor = %s AND "
                f"j.status = ANY(%s) AND NOT (j.queued_at IS NOT NULL AND j.placed_at IS NULL) GROUP BY l.node",
                [self.name, list(LIVE)])
            for host, indices, jobs in cursor.fetchall():
                if host in out:
                    out[host]["gpus"].update(zip(indices, jobs))
        rows = Launch.objects.filter(node__in=list(out), executor=self.name, job__status__in=LIVE, cores__gt=0).exclude(
            job__queued_at__isnull=False, job__placed_at__isnull=True)
        for job_id, host, cores in rows.values_list("job_id", "node", "cores"):
            out[host]["cores"][job_id] = cores
        return out


NODE = NodeExecutor()


def _launch(job):
    try:
        return job.launch
    except Launch.DoesNotExist:
        return None


def checkpoint_names(names, definition):
    """[(step, name)] of the checkpoint folder names that match the recipe's pattern, else the frameworks'."""
    patterns = [definition["checkpoint_pattern"]] if definition.get("checkpoint_pattern") else CHECKPOINT_PATTERNS
    found = []
    for name in names:
        for pattern in patterns:
            match = re.fullmatch(pattern, name)
            if match:
                found.append((int(match.group(1)), name))
                break
    return sorted(found)


# -- placement -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchPlacement(Placement):
    """Where a launch goes (its worker's own queue) and what it is given there: GPUs by NVML index, or cores."""

    node: str = ""
    gpus: list = field(default_factory=list)
    cores: int = 0


def refusal(devices, node="", pool="", now=None):
    """InputError naming what nobody has when no live launch worker on `node` / in `pool` could ever run a launch
    asking for `devices` ({kind, count}), however long it waited in the line; else nothing."""
    kind, count = devices["kind"], devices["count"]
    want = f"{count} × {'GPU' if kind == 'cuda' else 'core'}{'s' if count > 1 else ''}"
    workers = [w for w in launch_workers(now) if w.team == pool and (not node or w.host == node)]
    if not workers:
        raise InputError("node" if node else "pool" if pool else "devices",
                         f"no launch worker has reported{where_text(node, pool)}, so nobody can run {want}: start one "
                         "on a GPU node "
                         "(`manage.py up --role jobs,collector` starts the node's launch worker)")
    if kind == "cuda" and not any(len(w.gpus) >= count for w in workers):
        have = "; ".join(describe(w) for w in workers)
        none = "has a cuda device" if not any(w.gpus for w in workers) else f"has {count} GPUs"
        raise InputError("devices", f"needs {want}; no launch worker {none}{where_text(node, pool)}: {have}; "
                                    "start a launch worker on a node with GPUs, or pick a cpu recipe")
    if kind == "cpu" and not any(w.cores >= count for w in workers):
        have = "; ".join(describe(w) for w in workers)
        raise InputError("devices", f"no launch worker has {want} (cpu recipes share a node's cores, but need that "
                                    f"many): {have}; ask for fewer")


def where_text(node, pool):
    """Where a launch may go, as its refusals say it: " on node gpu-a in the shared pool"."""
    return (f" on node {node}" if node else "") + (f" in pool {pool}" if pool else " in the shared pool")


# -- start --------------------------------------------------------------------------------------------


def parameter_values(recipe_definition, given):
    """The recipe's parameter values: `given` ({name: value}, from JSON or a form's text) checked against each
    parameter's type, bounds and pattern, defaults for the rest. InputError names the parameter (params.<name>)."""
    given = {} if given is None else given
    if not isinstance(given, dict):
        raise InputError("params", f"params must be an object of parameter values, got {given!r}")
    params = [Param(spec) for spec in recipe_definition["params"]]
    names = {p.name for p in params}
    unknown = sorted(set(given) - names)
    if unknown:
        raise InputError(f"params.{unknown[0]}", f"the recipe has no parameter {unknown[0]!r}; its parameters are "
                                                 f"{', '.join(sorted(names)) or 'none'}")
    values = {}
    for param in params:
        raw = given.get(param.name, param.default)
        try:
            values[param.name] = param.value(raw, field=f"params.{param.name}")
        except ParamError as err:
            raise InputError(err.field, err.message) from None
    return values


def start(*, recipe=None, params=None, name="", team=None, env="", budget_usd=None, node="", pool="", created_by=None,
          init_from=None, init_step=None, stop_loss=None, cluster=None, init_path=None, priority="normal"):
    """Validate the launch, place it, create the queued job, its Launch and its MLflow run, and (after commit) send
    it to the chosen launch worker; return the job. InputError names the first bad field; nothing is created then.

    `recipe`: its name; `params`: values for its parameters; `env`: the job's environment (its MLflow experiment,
    what IPD compares; default the recipe's name); `init_from`: a launched job whose final checkpoint fills
    {init_from} (a Continue); `init_path`: instead, the folder {init_from} names (a campaign's starting model,
    scored by its evaluation recipe; kept among the launch's values as `init_from`); `cluster`: the registered
    cluster a recipe that runs on one is submitted to (default the recipe's own, or the only one of its kind)."""
    if not isinstance(recipe, str) or not recipe:
        raise InputError("recipe", "recipe is required: the name of one of the admins' recipes")
    row = Recipe.objects.filter(name=recipe).first()
    if row is None:
        names = ", ".join(Recipe.objects.values_list("name", flat=True)) or "none yet (an admin defines them)"
        raise InputError("recipe", f"there is no recipe {recipe!r}; recipes: {names}")
    definition = row.definition
    values = parameter_values(definition, params)
    name = inputs.text("name", name or recipe, NAME_MAX)
    team = inputs.text("team", team, TEAM_MAX)
    env = inputs.text("env", env or recipe, ENV_MAX)
    budget = inputs.budget(budget_usd)
    stop_rule = stoploss.parse(stop_loss)
    node, pool = inputs.name_field("node", node, 255), inputs.name_field("pool", pool, TEAM_MAX)
    priority = inputs.priority(priority, created_by)
    source, init_step = _init_from(definition, init_from, init_step, init_path)
    if init_path:
        values["init_from"] = init_path
    executor = executor_named(definition.get("executor"))
    if cluster not in (None, "") and not isinstance(cluster, str):
        raise InputError("cluster", f"cluster must be the name of a registered cluster, got {cluster!r}")
    if cluster and not executor.remote:
        raise InputError("cluster", f"recipe {recipe} runs on a node's launch worker, not on a cluster: leave cluster "
                                    "empty (an admin's recipe says where it runs)")
    target = _cluster(definition, cluster) if executor.remote else None
    if source is not None and not node and not executor.remote:
        node = source.launch.node  # {init_from} is a folder on the node the job it continues ran on
    check_experiment(env)  # before the job is created: a refusal after it would use up a job id
    # On a node's launch worker it waits in the line (trainer/queue.py) until its devices are free; refused only
    # when no live worker could ever run it. A cluster's scheduler keeps a line of its own.
    placement = executor.place(definition, node=node, pool=pool, cluster=target)
    with transaction.atomic():
        now = timezone.now()
        job = Job.open(
            reason=f"launched by {created_by}" if created_by else "launched",
            name=name, team=team, env=env, config=steps_config(values), budget_usd=budget,
            device=definition["devices"]["kind"],
            devices=definition["devices"]["count"], node=node, pool=pool, created_by=created_by,
            source=LAUNCHED.source, framework=definition.get("framework", ""), init_from=source, init_step=init_step,
            placed_on=placement.worker if placement else "", stop_loss={**stop_rule, "from_step": 0} if stop_rule else {},
            priority=priority, queued_at=now, placed_at=now if placement else None,
        )
        Launch.objects.create(job=job, recipe=row, recipe_name=row.name, recipe_version=row.version,
                              definition=definition, values=values, executor=executor.name, cluster=target)
        try:
            tracking_store.attach_run(job, experiment=env, score_key=definition.get("score_key", ""),
                                      created_by=created_by)
        except TrackingError as err:  # deleted since check_experiment
            raise InputError("env", f"env: {err.message}") from None
        if placement:
            executor.dispatch(job, placement)
        else:
            place_waiting(now)
    job.refresh_from_db()
    return job


def steps_config(values):
    """The job's config from its parameter values: {"steps": N} when a parameter (RECIPE_STEPS_PARAMS) gives the
    run's total steps, else {}."""
    for name in RECIPE_STEPS_PARAMS:
        value = values.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return {"steps": value}
    return {}


def check_experiment(env):
    """InputError when the job's MLflow run could not go into experiment `env` (a deleted one of that name)."""
    try:
        found = tracking_store.get_experiment_by_name(env)
    except TrackingError:
        return  # none yet: attach_run makes it
    if found.lifecycle_stage != Stage.ACTIVE:
        raise InputError("env", f"env: the experiment {env!r} is {found.lifecycle_stage}: restore it, or give another "
                                "env")


def _cluster(definition, name):
    """The registered cluster a launch of `definition` is submitted to: `name` (the launch's), else the recipe's,
    else the only one of the executor's kind; InputError naming the clusters there are."""
    kind = definition["executor"]
    name = name or definition.get("cluster") or ""
    clusters = Cluster.objects.filter(kind=kind)
    if not name:
        if clusters.count() == 1:
            return clusters.get()
        there = ", ".join(c.name for c in clusters) or "none yet (an admin registers one on the Clusters page)"
        raise InputError("cluster", f"this recipe runs on a {kind} cluster: choose one ({there})")
    row = clusters.filter(name=name).first()
    if row is None:
        there = ", ".join(c.name for c in clusters) or "none yet (an admin registers one on the Clusters page)"
        raise InputError("cluster", f"there is no {kind} cluster {name!r}; {kind} clusters: {there}")
    return row


def _init_from(definition, init_from, init_step, init_path=None):
    """(the launched job a Continue starts from, its checkpoint step) or (None, None); InputError when the recipe
    cannot take one or the job has no checkpoint, or `init_path` (a folder given instead) is no absolute path."""
    uses = names_init_from(definition)
    if init_path not in (None, ""):
        if init_from not in (None, "") or not uses:
            raise InputError("init_from", "init_from is a job or a folder, for a recipe that names {init_from}; got "
                                          f"both or a recipe without it (folder {init_path!r})")
        if not isinstance(init_path, str) or not init_path.startswith("/") or len(init_path) > 1000:
            raise InputError("init_from", f"init_from's folder must be an absolute path, got {init_path!r}")
        return None, None
    if init_from in (None, ""):
        if uses:
            raise InputError("init_from", "this recipe starts from another job's checkpoint ({init_from}): give "
                                          "init_from, the id of an ended launched job with a checkpoint")
        return None, None
    if not uses:
        raise InputError("init_from", "this recipe names no {init_from}, so it cannot continue another job")
    source, step = inputs.init_from(init_from, init_step)
    if source.source != LAUNCHED.source:
        raise InputError("init_from", f"init_from: job {source.pk} is a {source.source} run; a launched run "
                                      "continues from another launched run's checkpoint")
    return source, step


def init_from_path(job):
    """The folder {init_from} names for `job`: the checkpoint of the job it continues at its init_step."""
    source = job.init_from
    launch = source.launch
    names = dict(checkpoint_names(launch.checkpoints, launch.definition))
    return f"{launch.job_dir}/{names[job.init_step]}"


def restart(job, by=None):
    """A new launched job with `job`'s recipe (its current version), parameter values, team and environment; for a
    job that cannot resume (no checkpoint). InputError as for start."""
    launch = job.launch
    values = dict(launch.values)
    init_path = values.pop("init_from", None)  # a folder it was started on, not a parameter
    return start(recipe=launch.recipe_name, params=values, name=job.name, team=job.team, env=job.env,
                 budget_usd=job.budget_usd, node=job.node, pool=job.pool, created_by=by,
                 init_from=job.init_from_id, init_step=job.init_step, stop_loss=job.stop_loss or None,
                 cluster=launch.cluster.name if launch.cluster_id else None, init_path=init_path)


def revoke_ended_tokens(now=None):
    """Revoke the tracking tokens of launched jobs that ended (the worker revokes its own; this catches the
    jobs a dead worker left). Return how many."""
    cutoff = (now or timezone.now()) - timedelta(seconds=5)
    ended = Launch.objects.filter(token__revoked=False).exclude(job__status__in=LIVE).filter(
        job__finished_at__lt=cutoff)
    return ApiToken.objects.filter(pk__in=ended.values("token_id")).update(revoked=True)


def match_other_nodes(now=None):
    """Stints for the GPU holders of launched jobs on nodes other than their worker's (a launcher that spreads to
    other nodes: each process carries the job's YARDSTICK_JOB_ID, which the node agents record), by the same holder
    matching as an outside run's; the worker's own node is its own to charge. Return the totals."""
    totals = {"runs": 0, "created": 0, "ended": 0}
    open_jobs = Stint.objects.filter(ended_at__isnull=True).values("job_id")
    for launch in Launch.objects.filter(Q(job__status__in=ACTIVE) | Q(job_id__in=open_jobs)).select_related("job"):
        run = getattr(launch.job, "run", None)
        if run is None:
            continue
        counts = matching.match_run(run, now, skip_node=launch.node)
        totals["runs"] += 1
        totals["created"] += counts["created"]
        totals["ended"] += counts["ended"]
    return totals


def requeue_orphans(now=None, worker=None):
    """The queued launched jobs placed on a launch worker that does not hold them. One that stopped reporting before
    it started them (gone, or killed): back in the line, at the place they had; what they were given is free again,
    and the placer gives them devices on a worker that reports. One whose process started after they were placed (a
    restart under the same name: the process that took their messages is gone, or their messages are still in its
    queue): their messages are sent again, and they keep what they were given; whichever message the worker takes
    first claims the job, the other finds it no longer queued. `worker`: only those placed on it (a worker
    starting). Return the jobs put back or sent again."""
    live = {w.name: w for w in launch_workers(now)}
    back, again = [], []
    placed = Job.objects.filter(status=Status.QUEUED, source=LAUNCHED.source, launch__executor=NODE.name).exclude(
        queued_at__isnull=False, placed_at__isnull=True).select_related("launch")
    if worker is not None:
        placed = placed.filter(launch__worker=worker)
    for job in placed:
        on = job.launch.worker
        if not on:
            continue
        if on in live:
            if live[on].holds_no_job_placed(job.placed_at):
                with transaction.atomic():
                    if Job.objects.filter(pk=job.pk, status=Status.QUEUED, launch__worker=on,
                                          placed_at=job.placed_at).update(placed_at=now or timezone.now()):
                        transaction.on_commit(lambda pk=job.pk, on=on: current_app.send_task(RUN_LAUNCH, args=[pk],
                                                                                              queue=on))
                        again.append(job)
            continue
        with transaction.atomic():
            if Job.objects.filter(pk=job.pk, status=Status.QUEUED, launch__worker=on).update(
                    placed_at=None, placed_on="", queued_at=Coalesce("queued_at", "created_at"),
                    waiting_for=f"its launch worker {on} stopped reporting before it started the job"):
                Launch.objects.filter(pk=job.pk).update(worker="", gpus=[], cores=0)
                back.append(job)
    if back:
        place_waiting(now)
    return back + again

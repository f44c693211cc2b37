"""Embedded jobs: GRPO runs Yardstick trains itself on its Celery `jobs` workers.

A job is validated and placed on a worker that has the devices it asks for (trainer.workers.place),
created queued, and sent to that worker's queue after commit; the worker claims it, beats while it
trains and writes checkpoints under the job's checkpoint_dir, which a Resume and a Continue start from.
"""

from celery import current_app
from django.db import transaction
from django.utils import timezone

from trainer import inputs, stoploss
from trainer.kinds import Kind
from trainer.models import ACTIVE, NAME_MAX, TEAM_MAX, Job, Source, Status, Stint, Worker
from trainer.queue import Want, place_waiting
from trainer.workers import Placement, device_refusal, gpu_indices, is_jobs_worker, live_jobs_workers, place

LIVE = (Status.QUEUED, *ACTIVE)
from yardstick.inputs import InputError

# The Celery task that runs a job (trainer.tasks.run_job), routed to the jobs queue by this name.
RUN_JOB = "trainer.tasks.run_job"


class Embedded(Kind):
    source = Source.EMBEDDED
    holds_policy = True
    worker_beats = True

    def placement(self, job):
        placement = place(job.device, job.devices, job.node, job.pool)  # refuses what no worker could ever run
        return None if self.wants(job) is not None else placement  # on GPUs: in the line

    def start(self, **fields):
        return start(**fields)

    def checkpoint_steps(self, job):
        return sorted(int(p.stem.removeprefix("step-")) for p in job.checkpoint_dir.glob("step-*.pt"))

    def held_on(self, workers):
        """An embedded job on a node holds the GPUs the line gave it (from its placement on, before it starts) and
        those its open stints name (by UUID), and one core a rank: whichever of the node's workers runs it (its jobs
        worker), another (its launch worker) must not give them out."""
        hosts = {w.host for w in workers}
        out = {host: {"gpus": {}, "cores": {}} for host in hosts}
        placed = Job.objects.filter(source=self.source, status__in=LIVE).exclude(gpus=[]).exclude(
            queued_at__isnull=False, placed_at__isnull=True).values_list("pk", "placed_on", "gpus")
        placed = list(placed)  # a few: the built-in jobs on GPUs now
        where = dict(Worker.objects.filter(name__in=[worker for _pk, worker, _gpus in placed],
                                           host__in=hosts).values_list("name", "host"))
        for job_id, worker, given in placed:
            if worker in where:
                out[where[worker]]["gpus"].update({i: job_id for i in given})
        stints = list(Stint.objects.filter(ended_at__isnull=True, node__in=hosts, job__source=self.source)
                      .values_list("job_id", "node", "device"))
        index = {(w.host, g.get("uuid")): g.get("index") for w in workers if w.host in {n for _j, n, _d in stints}
                 for g in w.gpus}
        for job_id, host, device in stints:
            held = out[host]
            if (host, device) in index:
                held["gpus"][index[(host, device)]] = job_id
            else:
                held["cores"][job_id] = held["cores"].get(job_id, 0) + 1
        return out

    def wants(self, job):
        return self.wants_all([job])[job.pk]

    def wants_all(self, jobs):
        # A job that asks for GPUs waits in the line for them (start decides: a cuda device, or auto where a jobs
        # worker has GPUs); one on cpu is placed as it starts (cores are shared).
        gpu_workers = [w for w in live_jobs_workers() if gpu_indices(w)] if any(j.device == "auto" for j in jobs) \
            else []
        out = {}
        for job in jobs:
            # One in the line joined it for GPUs (auto where a GPU worker was live then): it waits for GPUs still.
            gpus = job.in_line or wants_gpus(job.device, job.node, job.pool, gpu_workers)
            index = int(job.device.partition(":")[2]) if job.device.startswith("cuda:") else None
            out[job.pk] = Want("cuda", job.devices, job.node, job.pool, index=index) \
                if job.queued_at is not None and gpus else None
        return out

    def runs_on(self, worker):
        return is_jobs_worker(worker)

    def joined_line(self, job, now):
        place_waiting(now)

    def place_at(self, job, worker, gpus, cores):
        Job.objects.filter(pk=job.pk).update(gpus=gpus)
        job.gpus = gpus
        self.dispatch(job, Placement(worker.name, worker.name))

    def dispatch(self, job, placement):
        # By the task's name: trainer.tasks imports this module, so this one does not import it back.
        job_id, queue = job.pk, placement.queue
        transaction.on_commit(lambda: current_app.send_task(RUN_JOB, args=[job_id], queue=queue))

    def worker_started(self, worker):
        return replace_orphans(worker=worker)


EMBEDDED = Embedded()


def wants_gpus(device, node="", pool="", gpu_workers=None):
    """Whether a job of `device` trains on GPUs, so waits in the line for them: cuda or cuda:N, or auto where a live
    jobs worker of its pool (and node) has GPUs. `gpu_workers`: those live jobs workers with GPUs, if read already."""
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    if gpu_workers is None:
        gpu_workers = [w for w in live_jobs_workers() if gpu_indices(w)]
    return any(w.team == pool and (not node or w.host == node) for w in gpu_workers)


def start(*, name, team, env, config=None, budget_usd=None, device="auto", devices=1, node="", pool="",
          created_by=None, enqueue=True, runs_here=False, init_from=None, init_step=None, stop_loss=None,
          check_only=False, priority="normal"):
    """Validate the input, create a queued job and (after commit) enqueue its task.

    Raise InputError naming the first bad field; nothing is created then.
    `init_from` (a job id) continues that job's policy: the run starts from its checkpoint at
    `init_step` (default: its final one) instead of the base policy, on any environment.
    With enqueue=False the caller runs it (`manage.py train` does, in the foreground);
    `runs_here` checks the device against what torch sees in this process instead of
    what the jobs workers report. `devices`, `node` and `pool` say where it may run: it is
    placed on a jobs worker that has them all (trainer.workers.place), or refused.
    `stop_loss`: the rule that stops it once it stops buying intelligence (trainer/stoploss.py).
    `check_only`: check every field and the placement, create nothing and return None (a created row rolled back
    would still use up a job id). A job that trains on GPUs (`wants_gpus`) waits in the line for them
    (trainer/queue.py), by `priority`; one on cpu is sent at once.
    """
    # here: trainer.rl loads torch, which only this path needs
    from trainer.rl.config import ConfigError, TrainConfig

    name = inputs.text("name", name, NAME_MAX)
    team = inputs.text("team", team, TEAM_MAX)
    if not isinstance(env, str) or not env.strip():
        raise InputError("env", f"env is required: one of {', '.join(inputs.env_names())}")
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise InputError("config", f"config must be an object of TrainConfig fields, got {config!r}")
    if "env" in config and config["env"] != env:
        raise InputError("config.env", f"config.env ({config['env']!r}) differs from env ({env!r}); give it once")
    try:
        cfg = TrainConfig.from_dict({**config, "env": env})
    except ConfigError as err:
        field = "env" if err.field == "env" else f"config.{err.field}"
        raise InputError(field, err.message) from None
    except TypeError as err:  # a dataclass refusing something from_dict let through
        raise InputError("config", f"config is not usable: {err}") from None
    budget = inputs.budget(budget_usd)
    stop_rule = stoploss.parse(stop_loss)
    device = inputs.device(device)
    devices = inputs.devices(devices, device)
    node, pool = inputs.name_field("node", node, 255), inputs.name_field("pool", pool, TEAM_MAX)
    priority = inputs.priority(priority, created_by)
    if cfg.prompts_per_step < devices:  # each device takes whole prompt groups
        raise InputError("config.prompts_per_step", f"config.prompts_per_step must be at least devices ({devices}): "
                                                    f"each device takes whole prompt groups; got {cfg.prompts_per_step}")
    if runs_here:
        refusal = device_refusal(device, devices)
        if refusal:
            raise InputError("device", refusal)
        placement = None
    else:
        placement = place(device, devices, node, pool)
    source, init_step = inputs.init_from(init_from, init_step)
    if source is not None and source.source != Source.EMBEDDED:
        raise InputError("init_from", f"init_from: job {source.pk} is a {source.source} run; its checkpoints are in "
                                      "its own framework's format, which the built-in trainer does not load")
    if check_only:
        return None

    in_line = enqueue and not runs_here and wants_gpus(device, node, pool)
    now = timezone.now()
    with transaction.atomic():
        job = Job.open(
            reason=f"created by {created_by}" if created_by else "created",
            name=name, team=team, env=env, config=cfg.to_dict(), budget_usd=budget,
            device=device, devices=devices, node=node, pool=pool, created_by=created_by, init_from=source,
            init_step=init_step, placed_on=placement.worker if placement and not in_line else "",
            stop_loss={**stop_rule, "from_step": 0} if stop_rule else {}, priority=priority,
            queued_at=now, placed_at=None if in_line else now,
        )
        if in_line:
            place_waiting(now)
        elif enqueue:
            EMBEDDED.dispatch(job, placement)
    if in_line:
        job.refresh_from_db()
    return job


def replace_orphans(now=None, worker=None):
    """Send again the queued jobs whose chosen worker does not hold them: to a live one that can run them when it
    stopped reporting, to it again when its process started after they were placed (a restart under the same name:
    the process that took the message is gone, or the message is still in its queue). Return those sent. `worker`:
    only those placed on it (a worker starting). A message left in a queue is harmless: whoever runs the job first
    claims it, and the claim of the other finds it no longer queued."""
    live = {w.name: w for w in live_jobs_workers(now)}
    moved = []
    back = False
    placed = Job.objects.filter(status=Status.QUEUED, source=EMBEDDED.source).exclude(placed_on="")
    if worker is not None:
        placed = placed.filter(placed_on=worker)
    for job in placed:
        if job.placed_on in live:
            # Restarted since it was placed there: sent again to it, keeping what it was given (the message still
            # in its queue, if any, finds the job claimed).
            if live[job.placed_on].holds_no_job_placed(job.placed_at):
                with transaction.atomic():
                    if Job.objects.filter(pk=job.pk, status=Status.QUEUED, placed_on=job.placed_on,
                                          placed_at=job.placed_at).update(placed_at=now or timezone.now()):
                        transaction.on_commit(lambda pk=job.pk, on=job.placed_on: current_app.send_task(
                            RUN_JOB, args=[pk], queue=on))
                        moved.append(job)
            continue
        if EMBEDDED.wants(job) is not None:  # given GPUs from the line: back in it, at its place
            back |= bool(Job.objects.filter(pk=job.pk, status=Status.QUEUED, placed_on=job.placed_on).update(
                placed_at=None, placed_on="", gpus=[],
                waiting_for=f"its jobs worker {job.placed_on} stopped reporting before it started the job"))
            continue
        try:
            placement = EMBEDDED.placement(job)
        except InputError:
            continue  # nobody can run it now: it waits where it is (its worker may come back)
        with transaction.atomic():
            if Job.objects.filter(pk=job.pk, status=Status.QUEUED, placed_on=job.placed_on).update(
                    placed_on=placement.worker, placed_at=now or timezone.now(), gpus=[]):  # on cpu: no GPU given
                EMBEDDED.dispatch(job, placement)
                job.placed_on = placement.worker
                moved.append(job)
    if back:
        place_waiting(now)
    return moved

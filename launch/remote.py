"""Launched jobs on a scheduler Yardstick submits to and follows (a Ray cluster, a Slurm cluster).

A `RemoteExecutor` speaks to one kind of scheduler with five calls: `submit` a start, read its `state` and its
`log`, `cancel` it, list the cluster's `nodes`. Everything else is here, the same for every scheduler:

- placement is the scheduler's: the job is queued for its cluster, and the follower submits it;
- the follower (`follow`, every settings.LAUNCH_FOLLOW_S from beat, and at once after a launch) keeps nothing in
  memory: each pass reads the job's Launch row, asks the scheduler, writes what changed. A control plane that was
  down picks every job up again at its first pass; a job its scheduler no longer knows fails, saying so;
- a cluster that does not answer marks its jobs "cluster unreachable" (Launch.unreachable_since), never failed, and
  the alert rule "Cluster unreachable" fires after its duration; the first answer clears it;
- the log: each pass takes the lines the scheduler's log has gained (whole lines; the rest once it has ended) into
  the job's output, capped and published like a node's (launch.executor.OutputWriter);
- a stop goes in the same steps as on a node: the run's stop flag, then after the recipe's first grace the
  scheduler's cancel (SIGTERM, and SIGKILL after the second grace: Ray's stop carries that wait itself; Slurm's
  executor signals first, and the follower cancels the job once the second grace is over);
- where it runs: the scheduler's allocation (Slurm's nodes, the node Ray runs its driver on), each of its nodes tied
  to the Yardstick node an agent measures there, by name or by address (`measured_where`, `node_finder`): a cpu
  recipe's job holds the host device of those nodes (`Follower.hold`), a GPU recipe's GPUs are its processes' that
  the agents there find; a node no agent measures makes the job's cost "not measured" (launch.kind, `unmeasured`);
- the end follows the scheduler's: SUCCEEDED completed, FAILED failed with the scheduler's message, STOPPED stopped.
  The scheduler's own word for it (Slurm's TIMEOUT, OUT_OF_MEMORY, ...) is what the job page shows, with its reason
  (a pending Slurm job's Resources, Priority, ...).

Each job is followed under a row lock taken with SKIP LOCKED, so two followers (two beats, a beat and a launch)
never handle one job at once; a submission's id is derived from the job and its start, so a submission the
scheduler took but whose transaction was lost is found again, not repeated.
"""

import logging
import shlex
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import PurePosixPath

from celery import current_app
from django.db import transaction
from django.db.models import Q, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from collector.models import Node
from launch.executor import LaunchError, OutputWriter, command, env_names, found_checkpoints, issue_token, run_variables
from launch.executors import Executor, executor_named, executors
from launch.kind import LIVE, LaunchPlacement, checkpoint_names
from launch.models import Cluster, Launch
from launch.output import LineSplitter, failure
from launch.params import render
from tracking import matching
from trainer.models import Job, Status, Stint
from trainer.runner import tell_run_ended
from yardstick.inputs import InputError
from yardstick.live import publish
from yardstick.models import ApiToken

log = logging.getLogger(__name__)

FOLLOW = "launch.tasks.follow_remote"
# What a scheduler says of a job (Ray's JobStatus names; another scheduler's executor maps its own onto them and
# keeps its own word in RemoteState.said).
PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"
ENDED = (SUCCEEDED, FAILED, STOPPED)
# The stop step of a job whose cancel its cluster could not be asked for (it did not answer): Launch.stop_step.
NO_ANSWER = "no-answer"
# The lines of a failed run's log its error quotes (as a node's quotes its stderr's: launch/executor.py).
QUOTED = 10
MAX_TAIL_CHARS = 256 * 2**10  # how much of a log's end those lines are looked for in


class Unreachable(Exception):
    """The cluster did not answer (connection refused, a timeout, a proxy's 5xx); says what happened."""


class Refused(Exception):
    """The scheduler answered and refused the submission; its words."""


@dataclass(frozen=True)
class Submission:
    """One start of a launched job, as a scheduler is given it."""

    id: str  # the scheduler's id for it, chosen by Yardstick: yardstick-job-<job>-<start>
    argv: list
    env: dict  # the run's variables (launch.executor.run_variables): reach every process of the job
    cwd: str  # "" for the scheduler's own
    working_dir: str  # what the scheduler ships to its nodes first ("" for none)
    devices: dict  # the recipe's {kind, count}
    stop_wait_s: int  # after SIGTERM, how long before SIGKILL
    metadata: dict = field(default_factory=dict)
    job_dir: str = ""  # the job's output directory on the shared storage ("" for none)
    options: dict = field(default_factory=dict)  # the recipe's options for this scheduler, rendered (Slurm's)

    def entrypoint(self):
        """The argv as one shell line, every item quoted whole (what a scheduler that takes a line runs)."""
        line = shlex.join(self.argv)
        return f"cd {shlex.quote(self.cwd)} && exec {line}" if self.cwd else line


@dataclass(frozen=True)
class RemoteState:
    status: str  # PENDING RUNNING SUCCEEDED FAILED STOPPED
    message: str = ""  # why it waits, how it failed: the scheduler's words
    exit_code: int | None = None  # negative: killed by that signal
    said: str = ""  # the scheduler's own name of the state, where it has its own (Slurm's TIMEOUT); "" for `status`
    allocation: dict | None = None  # what the scheduler gave it (nodes, GPUs, start, end), where it says

    @property
    def word(self):
        return self.said or self.status


@dataclass(frozen=True)
class RemoteNode:
    """A node as its cluster reports it; `yardstick_node` is the Yardstick node it is tied to (None: no telemetry
    reaches Yardstick from it, so what it costs cannot be measured)."""

    name: str
    address: str
    alive: bool
    head: bool
    gpus: float
    cpus: float
    yardstick_node: str | None = None


class RemoteExecutor(Executor):
    """A scheduler's executor: override the five calls; each raises Unreachable when the cluster does not answer."""

    remote = True

    def submit(self, cluster, submission):
        """Start `submission` on `cluster`; return the scheduler's id of it (None: `submission.id` is its id).
        Refused with the scheduler's words when it will not."""
        raise NotImplementedError

    def state(self, cluster, remote_id):
        """The RemoteState of the scheduler's job `remote_id`, or None when it knows no such job."""
        raise NotImplementedError

    def log(self, cluster, remote_id, job_dir=""):
        """The whole log of the scheduler's job `remote_id` so far (text); `job_dir`: its output directory."""
        raise NotImplementedError

    def cancel(self, cluster, remote_id):
        """Ask the scheduler to end the job: SIGTERM (and SIGKILL after the submission's stop_wait_s, where the
        scheduler carries that wait)."""
        raise NotImplementedError

    def kill(self, cluster, remote_id):
        """End the job outright, the stop's last step, once the second grace after `cancel` is over: for a
        scheduler whose cancel does not carry that wait itself. Returns whether it did anything."""
        return False

    def nodes(self, cluster):
        """[RemoteNode] of the cluster, as it reports them (yardstick_node left None: `tie` fills it)."""
        raise NotImplementedError

    # -- what every scheduler shares --------------------------------------------------------

    def place(self, definition, *, node="", pool="", cluster=None, job=None):
        if node:
            raise InputError("node", f"this recipe runs on a {self.name} cluster, whose scheduler places it: leave "
                                     "node empty")
        if cluster is None and job is not None:
            cluster = job.launch.cluster
        if cluster is None:
            raise InputError("cluster", f"this recipe runs on a {self.name} cluster: choose one")
        return LaunchPlacement(queue="", worker="", node="")

    def dispatch(self, job, placement):
        job_id = job.pk
        transaction.on_commit(lambda: current_app.send_task(FOLLOW, args=[job_id]))


def remote_names():
    return [e.name for e in executors() if e.remote]


def follow_all():
    """One pass over every live launch on a cluster, and every ended one whose cluster had not answered when it ended
    (its scheduler's word on it is still to be taken); return how many were followed."""
    rows = list(Launch.objects.filter(executor__in=remote_names()).filter(
        Q(job__status__in=LIVE) | Q(unreachable_since__isnull=False, cluster__isnull=False))
        .values_list("pk", "cluster_id", "job__status"))
    # A cluster that did not answer in this pass is not asked again about its ended jobs until the next one: each
    # question can wait out a timeout, and the default worker that follows also rolls up and attributes. A live job
    # is always followed, since its Stop must end whether its cluster answers or not.
    silent = set()
    for job_id, cluster_id, status in rows:
        if status not in LIVE and cluster_id in silent:
            continue
        try:
            follower = follow(job_id)
        except Exception:  # noqa: BLE001 - one job's trouble must not stop the others being followed
            log.exception("following launched job %s failed; the next pass tries again", job_id)
            continue
        if follower is not None and follower.silent:
            silent.add(cluster_id)
    return len(rows)


def follow(job_id):
    """One pass over launched job `job_id` on its cluster: submit it when queued, else bring it in line with what
    the scheduler says. Skipped while another follower has it."""
    with transaction.atomic():
        launch = (Launch.objects.select_for_update(skip_locked=True, of=("self",))
                  .select_related("job", "job__created_by", "cluster").filter(pk=job_id).first())
        if launch is None or launch.cluster is None or launch.executor not in remote_names():
            return None
        live = launch.job.status in LIVE
        if not live and launch.unreachable_since is None:
            return None
        follower = Follower(launch, executor_named(launch.executor))
        if not live:
            follower.settle()
        elif launch.job.status == Status.QUEUED:
            follower.submit()
        else:
            follower.follow()
        ended = follower.ended
    if ended is not None:
        tell_run_ended(ended)
    return follower


def render_options(options, values):
    """A recipe's options for its scheduler (its `slurm` object) with their {placeholders} filled: {} for none."""
    return {key: render([value], values)[0] if isinstance(value, str) else value
            for key, value in (options or {}).items()}


def shared_dir(launch):
    """The job's output directory on the cluster's shared storage ("" when its recipe names none)."""
    root = launch.definition.get("shared_dir")
    return str(PurePosixPath(root) / f"job-{launch.job_id}") if root else ""


class Follower:
    """One pass over one launched job on a cluster (inside `follow`'s transaction, its Launch row locked)."""

    def __init__(self, launch, executor):
        self.launch, self.executor, self.job, self.cluster = launch, executor, launch.job, launch.cluster
        self.out = OutputWriter(self.job.pk, launch.output_seq)
        self.ended = None  # the Job, when this pass ended it
        self.silent = False  # whether the cluster did not answer in this pass

    def save(self, **fields):
        for name, value in fields.items():
            setattr(self.launch, name, value)
        Launch.objects.filter(pk=self.launch.pk).update(**fields)

    # -- a start ------------------------------------------------------------------------------

    def submit(self):
        job, launch = self.job, self.launch
        if not job.claim(f"submitted by Yardstick's follower to {self.executor.name} cluster {self.cluster.name}"):
            return
        job.refresh_from_db()
        start = launch.starts + 1
        folder = shared_dir(launch)
        row = None  # the run's token once issued: revoked if this start fails
        try:
            argv, values = command(job, launch, folder, self.cluster_python())
            token, row = issue_token(job)
            env = run_variables(job, launch, job.run, token, values)
            cwd = render([launch.definition["workdir"]], values)[0] if launch.definition.get("workdir") else ""
            submission = Submission(
                id=f"yardstick-job-{job.pk}-{start}", argv=argv, env=env, cwd=cwd,
                working_dir=launch.definition.get("working_dir", ""), devices=launch.definition["devices"],
                stop_wait_s=launch.stop_grace_s[1],
                metadata={"yardstick_job": str(job.pk), "yardstick_recipe": launch.recipe_name,
                          "yardstick_start": str(start)},
                job_dir=folder, options=render_options(launch.definition.get(self.executor.name), values))
            self.save(starts=start, argv=argv, env_names=sorted(env_names(env, launch)), token=row, job_dir=folder,
                      remote_id=submission.id, remote_status=PENDING, remote_message="", stop_step="",
                      exit_code=None, log_offset=0, stop_flag_at=None, unreachable_since=None, worker="", node="",
                      allocation=None)
            remote_id = self.executor.submit(self.cluster, submission) or submission.id
            if remote_id != submission.id:
                self.save(remote_id=remote_id)
        except (Unreachable, Refused) as err:
            what = "did not answer" if isinstance(err, Unreachable) else "refused the job"
            self.fail(f"{self.executor.name} cluster {self.cluster.name} ({self.cluster.address}) {what}: {err}",
                      token=row)
            return
        except LaunchError as err:
            self.fail(str(err), token=row)
            return
        except Exception as err:  # noqa: BLE001 - whatever it was, the job must not stay running
            log.exception("submitting launched job %s failed", job.pk)
            self.fail(f"{type(err).__name__}: {err}"[:4000], token=row)
            return
        self.answered()
        self.out.say(f"submitted to {self.executor.name} cluster {self.cluster.name} as {remote_id}: "
                     f"{submission.entrypoint()}")

    def cluster_python(self):
        # {python} on a cluster: the interpreter its admin registered (Yardstick's own is a control-plane path).
        return self.cluster.python or "python"

    # -- following ------------------------------------------------------------------------------

    def follow(self):
        launch, job = self.launch, self.job
        try:
            state = self.executor.state(self.cluster, launch.remote_id)
            text = self.executor.log(self.cluster, launch.remote_id, launch.job_dir) if state is not None else ""
        except Unreachable as err:
            self.unreachable(err)
            self.stop_if_asked(answering=False)  # a Stop must end even while the cluster cannot be asked
            return
        self.answered()
        if state is None:
            self.fail(f"its {self.executor.name} job {launch.remote_id} is gone from cluster {self.cluster.name}: the "
                      "cluster no longer knows it (restarted, or its job history was lost), so how it ended is not "
                      "known")
            return
        final = state.status in ENDED
        self.take(text, final=final)
        changed = state.word != launch.remote_status or state.message != launch.remote_message
        if changed:
            self.save(remote_status=state.word, remote_message=state.message[:4000])
            if not final:  # (the end says it in its own words)
                self.out.say(f"{self.executor.name} says {state.word}" + (f": {state.message}" if state.message else ""))
        allocation = measured_where(state.allocation, launch.definition["devices"])
        if allocation is not None and allocation != launch.allocation:
            self.save(allocation=allocation)
            changed = True
        if allocation is not None:
            self.hold(allocation, final)
        if changed:  # the job page's launch card shows it without a reload (the job's own status may not change)
            publish(f"job.{job.pk}", "launch", {"job": job.pk, "remote_status": state.word})
        self.scan_checkpoints()
        if final:
            self.end(state, text)
            return
        self.stop_if_asked()

    def hold(self, allocation, final):
        """A cpu recipe's job holds the host device of each node it runs on that an agent measures, as a node's launch
        worker gives its job one: a stint there from the allocation's start, ended at its end. (Which of a node's
        GPUs a scheduler gave a GPU recipe it does not say: the agents there find them by the job's
        YARDSTICK_JOB_ID, launch.kind.match_other_nodes.) Its pid is matching.BOUND_PID: holder matching leaves it
        be and adds no second stint of the device beside it."""
        if self.launch.definition["devices"]["kind"] == "cuda" or not allocation.get("start"):
            return
        now = timezone.now()
        start = min(datetime.fromisoformat(allocation["start"]), now)
        end = min(datetime.fromisoformat(allocation["end"]), now) if final and allocation.get("end") else now
        steps = Job.objects.filter(pk=self.job.pk).values_list("steps_done", flat=True).first() or 0
        created = False
        for node in dict.fromkeys(n for n in allocation.get("yardstick_nodes") or () if n):
            mine = list(self.job.stints.filter(node=node, device="cpu", pid=matching.BOUND_PID, started_at__gte=start))
            if not mine:
                Stint.objects.create(job=self.job, node=node, device="cpu", device_name="cpu", pid=matching.BOUND_PID,
                                     started_at=start, ended_at=max(end, start) if final else None,
                                     end_reason=f"{self.executor.name} job ended" if final else "", first_step=0,
                                     last_step=steps if final else None)
                created = True
            elif final:
                Stint.objects.filter(pk__in=[s.pk for s in mine], ended_at__isnull=True).update(
                    ended_at=Greatest(Value(end), "started_at"), end_reason=f"{self.executor.name} job ended",
                    last_step=steps)
        if created:
            transaction.on_commit(self.job.announce_stints)

    def stop_if_asked(self, answering=True):
        row = Job.objects.filter(pk=self.job.pk).values("status", "budget_stop_requested").first()
        if row["status"] == Status.STOPPING or row["budget_stop_requested"]:
            self.stop_steps(stopping=row["status"] == Status.STOPPING, answering=answering)

    def take(self, text, final):
        """Keep the lines `text` (the scheduler's whole log) has beyond what is kept: whole lines, and the last
        partial one too when the job has ended."""
        new = text[self.launch.log_offset:]
        upto = len(new) if final else new.rfind("\n") + 1
        if upto <= 0:
            return
        splitter = LineSplitter()  # the same clean lines as a node's (progress bars at their last state, no ANSI)
        for line in [*splitter.feed(new[:upto].encode()), *splitter.close()]:
            self.out.add("stdout", line)
        self.out.flush()
        self.save(log_offset=self.launch.log_offset + upto)  # (the writer keeps output_seq)

    def stop_steps(self, stopping, answering=True):
        """The stop's steps that are due: the run's stop flag; after the first grace the scheduler's cancel (SIGTERM);
        after the second its kill, where the scheduler needs one. Each step writes a line saying what it did. While
        the cluster does not answer (`answering` False, or a cancel it did not take), the job ends once both graces
        are over, saying that its scheduler's job may still run there (`abandon`); the follower cancels it if the
        cluster answers later (`settle`)."""
        now = timezone.now()
        first, second = self.launch.stop_grace_s
        name = self.executor.name
        if self.launch.stop_flag_at is None:
            # The run read its flag from the Stop on (it asks the tracking API): the grace counts from the Stop (the
            # job's newest change to stopping, this start's), not from this pass, and a pass of its own comes when
            # the grace is over (not up to a beat later). A budget's stop is seen by this pass first.
            asked = (self.job.status_changes.filter(to_status=Status.STOPPING).order_by("-at")
                     .values_list("at", flat=True).first() if stopping else None)
            flag_at = min(asked or now, now)
            self.save(stop_flag_at=flag_at, stop_step="flag")
            self.out.say(f"stop requested: the run's stop flag is set; {name} stops it in {first} s if it runs on"
                         + ("" if answering else f" (cluster {self.cluster.name} does not answer now: if it still "
                                                 f"does not in {first + second} s, the job ends here without it)"))
            self.follow_again(max(0.0, first - (now - flag_at).total_seconds()))
        elapsed = (now - self.launch.stop_flag_at).total_seconds()
        if self.launch.stop_step in ("flag", NO_ANSWER) and elapsed >= first and answering:
            try:
                self.executor.cancel(self.cluster, self.launch.remote_id)
            except Unreachable as err:
                self.unreachable(err)
                answering = False
            else:
                self.save(stop_step="SIGTERM")
                self.out.say(f"the run ran on {first} s after its stop flag: {name} stops its job (SIGTERM, SIGKILL "
                             f"{second} s later)")
                self.follow_again(float(second))
        elif self.launch.stop_step == "SIGTERM" and elapsed >= first + second and answering:
            try:
                killed = self.executor.kill(self.cluster, self.launch.remote_id)
            except Unreachable as err:
                self.unreachable(err)
                answering = False
            else:
                if killed:
                    self.save(stop_step="cancel")
                    self.out.say(f"the run ran on {second} s after SIGTERM: {name} cancels its job")
        if answering:
            return
        if self.launch.stop_step == "flag" and elapsed >= first:
            self.save(stop_step=NO_ANSWER)
            self.out.say(f"the run ran on {first} s after its stop flag, and cluster {self.cluster.name} does not "
                         f"answer, so {name} cannot be asked to stop its job; Yardstick asks again every pass and "
                         f"ends the job here in {second} s if the cluster still does not answer")
            self.follow_again(float(second))
        if elapsed >= first + second:
            self.abandon()

    def follow_again(self, countdown):
        """A pass of its own for this job `countdown` seconds after this one commits (a stop step falls due)."""
        job_id = self.job.pk
        transaction.on_commit(lambda: current_app.send_task(FOLLOW, args=[job_id], countdown=countdown))

    def scan_checkpoints(self):
        """The checkpoints in the job's output directory, where this machine mounts the shared storage too."""
        if not self.launch.job_dir:
            return
        found = [name for _step, name in found_checkpoints(self.launch.job_dir, self.launch.definition)]
        if found and found != self.launch.checkpoints:
            self.save(checkpoints=found)
            steps = checkpoint_names(found, self.launch.definition)
            Job.objects.filter(pk=self.job.pk).update(checkpoint_step=steps[-1][0])

    # -- the cluster's answers ----------------------------------------------------------------

    def answered(self):
        now = timezone.now()
        if self.launch.unreachable_since is not None:
            gone = (now - self.launch.unreachable_since).total_seconds()
            self.out.say(f"cluster {self.cluster.name} answers again after {gone:.0f} s")
            self.save(unreachable_since=None)
        Cluster.objects.filter(pk=self.cluster.pk).update(answered_at=now, unreachable_since=None, error="")

    def unreachable(self, err):
        self.silent = True
        now = timezone.now()
        text = f"{err}"[:2000]
        if self.launch.unreachable_since is None:
            self.save(unreachable_since=now)
            self.out.say(f"cluster unreachable: {self.executor.name} cluster {self.cluster.name} "
                         f"({self.cluster.address}) does not answer ({text}); the job is not failed: Yardstick asks "
                         "again every pass and follows it when the cluster answers")
        Cluster.objects.filter(pk=self.cluster.pk).update(unreachable_since=Coalesce("unreachable_since", Value(now)),
                                                          error=text)

    # -- the end --------------------------------------------------------------------------------

    def end(self, state, text=""):
        job = Job.objects.get(pk=self.job.pk)
        stopped = self.launch.stop_flag_at is not None
        at = f"at step {job.steps_done}"
        if stopped:
            to = Status.BUDGET_EXHAUSTED if job.budget_stop_requested else Status.STOPPED
            who = f"{job.stop_reason}; " if job.stop_reason else ""
            how = ("the run ended itself at its stop flag" if self.launch.stop_step == "flag"
                   else f"{self.executor.name} stopped its job {self.launch.stop_grace_s[0]} s after its stop flag")
            to, reason, error = to, f"{who}{how} ({at}; {self.executor.name} says {state.word})", ""
        elif state.status == SUCCEEDED:
            to, reason, error = Status.COMPLETED, f"its {self.executor.name} job succeeded ({at})", ""
        elif state.status == STOPPED:
            to, reason, error = (Status.STOPPED, f"its {self.executor.name} job was stopped on the cluster, not from "
                                                 f"Yardstick ({at})", "")
        else:
            # As on a node: how it ended, then (when the run itself exited non-zero) its log's last line, and the
            # last lines quoted below.
            how = state.message.splitlines()[0] if state.message else f"its {self.executor.name} job failed"
            tail = last_lines(text, QUOTED)
            reason, error = failure(how, tail, own_exit=bool(state.exit_code and state.exit_code > 0))
            to = Status.FAILED
        self.save(exit_code=state.exit_code)
        self.out.say(f"ended {to}: {reason}" if to != Status.FAILED else f"ended failed: {reason}")
        self.revoke()
        if job.finish(to, reason, error=error[:4000]):
            job.refresh_from_db()
            self.ended = job

    def abandon(self):
        """End the stopping job whose cluster has not answered through both of its stop graces: stopped (or budget
        exhausted), saying that its scheduler's job may still run there; its token revoked and its stints closed
        now. Its Launch keeps unreachable_since, so the follower takes the cluster's word once it answers."""
        job = Job.objects.get(pk=self.job.pk)
        launch, name = self.launch, self.executor.name
        to = Status.BUDGET_EXHAUSTED if job.budget_stop_requested else Status.STOPPED
        who = f"{job.stop_reason}; " if job.stop_reason else ""
        since = launch.unreachable_since or timezone.now()
        asked = ("it was asked to stop its job (SIGTERM) but cannot confirm it ended" if launch.stop_step != NO_ANSWER
                 else f"its job {launch.remote_id} could not be stopped there")
        reason = (f"{who}{name} cluster {self.cluster.name} has not answered since {since:%Y-%m-%d %H:%M:%S} UTC, so "
                  f"{asked}: it may still run there; Yardstick cancels it if the cluster answers again (at step "
                  f"{job.steps_done}, {sum(launch.stop_grace_s)} s after its stop flag)")
        self._finish(to, reason, reason)

    def settle(self):
        """A pass over a job that ended while its cluster did not answer: once the cluster answers, take its word.
        Its scheduler's job still running is cancelled (SIGTERM, and killed where the scheduler needs that: the job
        ended here long ago); one that ended is recorded as it ended there. The job's own status stays."""
        launch, name = self.launch, self.executor.name
        try:
            state = self.executor.state(self.cluster, launch.remote_id)
            text = self.executor.log(self.cluster, launch.remote_id, launch.job_dir) if state is not None else ""
            if state is not None and state.status not in ENDED:
                self.executor.cancel(self.cluster, launch.remote_id)
                self.executor.kill(self.cluster, launch.remote_id)
        except Unreachable as err:
            self.unreachable(err)
            return
        self.answered()
        if state is None:
            self.out.say(f"its {name} job {launch.remote_id} is gone from cluster {self.cluster.name}: how it ended "
                         "there is not known")
            return
        self.take(text, final=state.status in ENDED)
        self.save(remote_status=state.word, remote_message=state.message[:4000], exit_code=state.exit_code)
        if state.status in ENDED:
            self.out.say(f"{name} says its job ended {state.word} there" + (f": {state.message.splitlines()[0]}"
                                                                           if state.message else ""))
        else:
            self.out.say(f"{name} says its job still ran ({state.word}) after it ended here: {name} stops it now "
                         f"(SIGTERM, then SIGKILL)")
        publish(f"job.{self.job.pk}", "launch", {"job": self.job.pk, "remote_status": state.word})

    def orphan(self, by=None):
        """End the live job because its cluster is forgotten while it does not answer: a queued one is cancelled, a
        running one fails (a stopping one stops), saying its scheduler's job may still run there."""
        job = Job.objects.get(pk=self.job.pk)
        who = f" by {by}" if by else ""
        since = self.cluster.unreachable_since or timezone.now()
        said = (f"{self.executor.name} cluster {self.cluster.name} was forgotten{who} after it had not answered since "
                f"{since:%Y-%m-%d %H:%M:%S} UTC")
        if job.status == Status.QUEUED:
            if job.transition([Status.QUEUED], Status.STOPPED, f"cancelled before it started: {said}",
                              finished_at=timezone.now()):
                self.out.say(f"ended stopped: {said}")
            return
        to = Status.STOPPED if job.status == Status.STOPPING else Status.FAILED
        reason = f"{said}: Yardstick no longer follows its job {self.launch.remote_id}, which may still run there"
        self._finish(to, reason, reason, error=reason if to == Status.FAILED else "")

    def fail(self, error, token=None):
        self._finish(Status.FAILED, error.splitlines()[0], error=error, token=token)

    def _finish(self, to, said, reason="", error="", token=None):
        """End the job `to` here, saying `said` in its output: its token revoked, then the one claimed transition
        (Job.finish), and only when this pass made it its open stints closed and self.ended set (another party that
        ended it first keeps its own end)."""
        self.out.say(f"ended {to}: {said}")
        self.revoke(token)
        job = Job.objects.get(pk=self.job.pk)
        if job.finish(to, reason, error=error[:4000]):
            for stint in job.stints.filter(ended_at__isnull=True):
                stint.end(to, job.steps_done)
            job.refresh_from_db()
            self.ended = job

    def revoke(self, token=None):
        ids = [pk for pk in (self.launch.token_id, token and token.pk) if pk]
        ApiToken.objects.filter(pk__in=ids).update(revoked=True)


def forget(cluster, by=None):
    """Forget `cluster` (launch.models.Cluster.forget). A cluster that answers is refused while a job launched on it
    is live (its follower needs the address); one that does not answer is forgotten with them, each ended saying so
    (Follower.orphan). Return (forgotten, the ids of the live jobs that keep it, the ids of the jobs ended)."""
    ended = []
    if cluster.unreachable_since is not None:
        for job_id in sorted(cluster.live_jobs()):
            with transaction.atomic():
                launch = (Launch.objects.select_for_update(of=("self",)).select_related("job", "cluster")
                          .filter(pk=job_id, cluster=cluster).first())
                if launch is None or launch.job.status not in LIVE:
                    continue
                follower = Follower(launch, executor_named(launch.executor))
                follower.orphan(by)
            ended.append(job_id)
            if follower.ended is not None:
                tell_run_ended(follower.ended)
    live = cluster.forget()
    return not live, live, ended


def last_lines(text, n):
    """The last `n` lines of a scheduler's log `text` that are not blank, clean as a node's (launch/output.py)."""
    splitter = LineSplitter()
    lines = [*splitter.feed(text[-MAX_TAIL_CHARS:].encode()), *splitter.close()]
    return [line for line in lines if line.strip()][-n:]


def node_finder():
    """A function (name, address) -> the Yardstick node a cluster's node is (None: no agent measures it): the node of
    that name, or named by that address; else one whose agent reports the address (collector Node.addresses: Ray
    names a node by its IP, the agent by its host name) or whose `address` label is it; else one whose short host
    name is the name's (Slurm's gpu-01 for the agent's gpu-01.cluster.local)."""
    by_name, by_address, by_short = {}, {}, {}
    for name, labels, addresses in Node.objects.values_list("name", "labels", "addresses"):
        by_name[name] = name
        by_short.setdefault(name.split(".")[0], name)
        for address in addresses or ():
            by_address.setdefault(address, name)
        if isinstance(labels, dict) and labels.get("address"):
            by_address.setdefault(str(labels["address"]), name)

    def find(name, address=""):
        return (by_name.get(name) or by_name.get(address) or by_address.get(address) or by_address.get(name)
                or by_short.get(name.split(".")[0]))

    return find


def tie(remote_nodes):
    """`remote_nodes` with yardstick_node filled (node_finder's)."""
    find = node_finder()
    return [replace(n, yardstick_node=find(n.name, n.address)) for n in remote_nodes]


def measured_where(allocation, devices=None):
    """A scheduler's `allocation` (RemoteState.allocation) with `yardstick_nodes`: for each of its hosts (beside its
    address, where the scheduler gives one), the Yardstick node an agent measures there, None where none does (what
    the job costs there cannot be measured: launch.kind's `unmeasured`); GPUs and CPUs the scheduler did not say
    (None) are what the recipe's `devices` reserved. None stays None."""
    if allocation is None:
        return None
    if devices:
        cuda = devices["kind"] == "cuda"
        reserved = {"gpus": devices["count"] if cuda else 0, "cpus": 0 if cuda else devices["count"]}
        allocation = {**allocation, **{k: v for k, v in reserved.items() if allocation.get(k) is None}}
    find = node_finder()
    hosts = allocation.get("hosts") or [allocation.get("nodes", "")]
    addresses = list(allocation.get("addresses") or [])
    addresses += [""] * (len(hosts) - len(addresses))
    return {**allocation, "yardstick_nodes": [find(host, address) for host, address in zip(hosts, addresses)]}

"""Post-training jobs: what to train, where it ran, what it learned at every step.

A `Job` owns its state machine. Every transition is one conditional UPDATE
(`... WHERE id = %s AND status = %s`) claimed by its row count, written to
`StatusChange` in the same transaction, and announced on the live "jobs" topic
after commit; a second caller that lost the race sees False and changes
nothing. The runner (trainer/runner.py) drives a job through its states; the
API, the admin and the cost engine call the request_* methods here. What
differs by kind of run (how it starts, resumes, continues, what it refuses)
lives in one module per kind behind `trainer.kinds.Kind`.

    queued ──claim──► running ──request_stop──► stopping
      │                 │  │                       │
      │ request_stop    │  └─ finish ─┐            │ finish
      ▼                 ▼             ▼            ▼
    stopped ◄─────── completed | failed | budget_exhausted
      │                              │             │
      └─────────── resume ──► queued ◄─────────────┘

A `Stint` is one uninterrupted stretch of a job on one device (the cost engine
charges device time and energy from these); `Step` holds one row of
namespaced metrics per GRPO update (step 0: the baseline evaluation); `Sample`
keeps a few rollouts per step so a person can read what the model wrote.
"""

import json
import math
from datetime import timedelta

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import DateTimeField, F, Q, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from trainer import stoploss
from trainer.kinds import kind_for, kind_of, kinds
from trainer.signals import devices_freed
from yardstick.celery import shutting_down
from yardstick.inputs import InputError
from yardstick.live import publish

# The sizes of a job's text fields (trainer.inputs checks what people type against them).
NAME_MAX = 200
TEAM_MAX = 100
ENV_MAX = 50
# Budgets are kept to the micro-dollar: a small CPU job's whole budget can be a fraction of a cent.
BUDGET_PLACES = 6


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"


# A worker owns the job in these states; the heartbeat is meaningful only here.
ACTIVE = (Status.RUNNING, Status.STOPPING)
# States a Stop applies to (a stopping job is already on its way).
STOPPABLE = (Status.QUEUED, Status.RUNNING)
# States a job may be resumed from (completed is done: start a new job to train further).
RESUMABLE = (Status.STOPPED, Status.FAILED, Status.BUDGET_EXHAUSTED)
ENDED = (Status.STOPPED, Status.COMPLETED, Status.FAILED, Status.BUDGET_EXHAUSTED)


class Source(models.TextChoices):
    """Who trains: Yardstick's own GRPO worker, an outside run reporting through the tracking API, or a
    recipe's command Yardstick started on a node (which reports through the tracking API too).

    Each is a kind of run (trainer/kinds/): what differs between them lives in its kind's module.
    """

    EMBEDDED = "embedded"
    EXTERNAL = "external"
    LAUNCHED = "launched"  # a recipe's command, run by a node's launch worker (launch/)


class Priority(models.IntegerChoices):
    """A waiting job's priority: the line is ordered by it, then by when each job joined. High is for admins."""

    LOW = 0, "low"
    NORMAL = 1, "normal"
    HIGH = 2, "high"

    @classmethod
    def parse(cls, raw):
        """The Priority a form or API value names ("low", "normal", "high", or 0-2); InputError saying what is accepted."""
        for choice in cls:
            if raw == choice.label or (isinstance(raw, int) and not isinstance(raw, bool) and raw == choice.value):
                return choice
        raise InputError("priority", f"priority must be one of low, normal, high; got {raw!r}")


class Job(models.Model):
    """One GRPO post-training run of a policy on an environment."""

    name = models.CharField(max_length=NAME_MAX)
    team = models.CharField(max_length=TEAM_MAX, db_index=True, help_text="who pays for it")
    env = models.CharField(max_length=ENV_MAX)  # an external run's: its experiment
    # The full TrainConfig (defaults filled in at creation), so later default changes never alter a job.
    config = models.JSONField()
    budget_usd = models.DecimalField(max_digits=16, decimal_places=BUDGET_PLACES, null=True, blank=True)
    # As requested: auto, cpu, cuda or cuda:N. Where it actually ran is on each Stint.
    device = models.CharField(max_length=20, default="auto")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    error = models.TextField(blank=True, default="", help_text="why it failed, for people")
    stop_requested = models.BooleanField(default=False)
    budget_stop_requested = models.BooleanField(default=False)
    # Why a stop was requested (who, or which budget), written on the final status change.
    stop_reason = models.TextField(blank=True, default="")
    # Set when what ended it was neither its run nor a person: its worker shutting down (a restart, a deploy) or
    # dying. A sweep resumes such a trial instead of taking where it stopped for a result; a resume clears it.
    interrupted_by = models.TextField(blank=True, default="")
    # Written by the worker while it owns the job; an old one means the worker died.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # What the worker is doing now, for people ("building the base policy ..."); empty when not active.
    phase = models.CharField(max_length=200, blank=True, default="")
    # Why a resume cannot help, for people (a device no worker has: it would fail again); empty when it can.
    not_resumable_reason = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True, help_text="first claimed by a worker")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="last ended (null while queued or active)")
    steps_done = models.IntegerField(default=0)
    checkpoint_step = models.IntegerField(null=True, blank=True, help_text="step of the newest checkpoint")
    baseline_pass1 = models.FloatField(null=True, blank=True, help_text="eval pass@1 before the first update, points")
    latest_pass1 = models.FloatField(null=True, blank=True, help_text="newest eval pass@1, points")
    latest_reward_mean = models.FloatField(null=True, blank=True)
    # External jobs are MLflow runs of TRL, veRL, NeMo RL... (tracking.Run, job.run); never enqueued.
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.EMBEDDED, db_index=True)
    framework = models.CharField(max_length=50, blank=True, default="",
                                 help_text='what trained it, from its tags or params: "trl", "verl", "nemo-rl", ...')
    # "Continue": the policy starts from this job's checkpoint at init_step instead of the base policy.
    init_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="continued_by")
    init_step = models.IntegerField(null=True, blank=True, help_text="step of init_from's checkpoint it starts from")
    # Where it may run (trainer/workers.py places it on a jobs worker that has all of it).
    devices = models.PositiveSmallIntegerField(
        default=1, help_text="devices it trains on, one process each (torch.distributed DDP when more than 1)")
    node = models.CharField(max_length=255, blank=True, default="", help_text="run only on this node; empty: any")
    pool = models.CharField(max_length=TEAM_MAX, blank=True, default="",
                            help_text="run only on this team's pool of workers; empty: the shared workers")
    placed_on = models.CharField(max_length=255, blank=True, default="",
                                 help_text="the jobs worker it was last sent to; empty: the shared queue")
    # Its place in the line of jobs waiting for devices (trainer/queue.py): the line is ordered by priority, then by
    # when each joined it. A job joins when it is started or resumed (queued_at) and leaves when the placer gives it
    # devices (placed_at); one the placer never waits for (a cluster's, an outside run) is placed as it joins.
    priority = models.PositiveSmallIntegerField(choices=Priority.choices, default=Priority.NORMAL)
    queued_at = models.DateTimeField(null=True, blank=True, help_text="when it last joined the line")
    placed_at = models.DateTimeField(null=True, blank=True, help_text="when it was last given devices; null: waiting")
    waiting_for = models.TextField(blank=True, default="", help_text="what it waits (or last waited) for, for people")
    line_place = models.PositiveIntegerField(null=True, blank=True, help_text="its place among those waiting in its pool")
    gpus = models.JSONField(default=list, blank=True, help_text="NVML indices of the GPUs the line gave it, on placed_on")
    # The rule that stops a run which stopped buying intelligence (trainer/stoploss.py); {} for none.
    stop_loss = models.JSONField(default=dict, blank=True)
    # What the stop-loss found when it stopped the job (alerts/stoploss.py: reason, window, the money it
    # saved as projected then); {} while it has not fired since the last resume.
    stop_loss_outcome = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="trainer_job_active_hb")]

    def __str__(self):
        return f"job {self.pk} {self.name!r} ({self.status})"

    # -- creation -------------------------------------------------------------

    @classmethod
    def start(cls, **fields):
        """Start an embedded job: trainer.kinds.embedded.start (its fields, and the InputError it raises)."""
        return kind_for(Source.EMBEDDED).start(**fields)

    @classmethod
    def open(cls, *, reason, **fields):
        """Create a job in its first state (`fields["status"]`, default queued) with the history row that
        says why, and announce it; a kind's module starts its jobs through this."""
        with transaction.atomic():
            job = cls.objects.create(**fields)
            change = StatusChange.objects.create(job=job, from_status="", to_status=job.status, at=job.created_at,
                                                 reason=reason)
            job._announce("", change=change)
        return job

    # -- transitions ------------------------------------------------------------

    def transition(self, from_statuses, to, reason="", where=None, **fields):
        """Move this job from one of `from_statuses` to `to`, setting `fields`.

        Each candidate is tried as one conditional UPDATE, so the row count says
        whether this call made the change. `where` adds conditions (a Q). Return
        the status it came from, or None when the job was in none of them. The
        methods below and the kinds' own transitions (tracking.kind follows an
        MLflow run's status) all come through here.
        """
        now = timezone.now()
        to = Status(to).value
        with transaction.atomic():
            for old in from_statuses:
                old = Status(old).value
                rows = Job.objects.filter(pk=self.pk, status=old)
                if where is not None:
                    rows = rows.filter(where)
                if rows.update(status=to, **fields):
                    change = StatusChange.objects.create(job_id=self.pk, from_status=old, to_status=to, at=now,
                                                         reason=reason)
                    self.refresh_from_db()
                    self._announce(old, reason, change)
                    # What it held is free: the next in line may start (trainer/queue.py), a sweep takes its pass.
                    # Not from a worker that is shutting down: what it started would go to workers going away.
                    if to in ENDED and not shutting_down():
                        transaction.on_commit(lambda: devices_freed.send(sender=Job, job=self))
                    return old
        self.refresh_from_db()
        return None

    def _announce(self, old, reason="", change=None):
        publish("jobs", "status", {
            "id": self.pk, "name": self.name, "team": self.team, "from": old, "status": self.status, "phase": self.phase,
            "steps_done": self.steps_done, "steps": self.steps_total, "reason": reason,
            "can_stop": self.can_stop, "can_resume": self.can_resume, "can_continue": self.can_continue,
            # A job page adds the history row and redraws "Where it ran" (a stint ends with the job).
            "change": change.to_dict() if change else None,
            "stints": [s.to_dict() for s in self.stints.order_by("started_at", "id")],
        })

    def announce_stints(self):
        """Publish where the job runs (its stints) to its page's "Where it ran", after the transaction."""
        publish(f"job.{self.pk}", "stints", {"job": self.pk, "stints": [s.to_dict() for s in self.stints.all()]})

    def claim(self, reason="claimed by a worker", where=None):
        """queued → running for the worker calling it (`reason`: who took it, for the status history); `where`: what
        else must hold (a Q). Never a job waiting in the line for devices. Return True when this caller got the job."""
        now = timezone.now()
        placed = ~Q(queued_at__isnull=False, placed_at__isnull=True)
        return self.transition(
            [Status.QUEUED], Status.RUNNING, reason, where=placed & where if where is not None else placed,
            heartbeat_at=now, started_at=Coalesce(F("started_at"), Value(now, output_field=DateTimeField())),
            finished_at=None, error="",
        ) is not None

    def request_stop(self, by=None, reason=""):
        """Ask the job to stop; the caller never waits for the worker.

        Queued: cancelled at once (→ stopped). Running: → stopping; the worker sees
        it at the next step boundary, writes a checkpoint and ends as stopped.
        `reason` (the stop-loss gives one) is kept and ends the final status change.
        Return True when the job is now stopped or stopping, False when it had
        already ended (see `status`).
        """
        who = f" by {by}" if by else ""
        if self.transition([Status.QUEUED], Status.STOPPED, f"cancelled before it started{who}",
                           finished_at=timezone.now()):
            return True
        if self.transition([Status.RUNNING], Status.STOPPING, reason or f"stop requested{who}", stop_requested=True,
                           stop_reason=reason):
            return True
        return self.status == Status.STOPPING

    def stop_for_loss(self, outcome):
        """The stop-loss fired (alerts/stoploss.py): keep what it found and stop the running job at its next
        step boundary, or through the tracking callback for an external run. Return True when this call
        stopped it (False: it was no longer running, or the rule fired already)."""
        with transaction.atomic():
            claimed = Job.objects.filter(pk=self.pk, status=Status.RUNNING, stop_loss_outcome={}).update(
                stop_loss_outcome=outcome)
            if not claimed:
                return False
            self.stop_loss_outcome = outcome
            return self.request_stop(by="stop-loss", reason=outcome["reason"])

    def set_stop_loss(self, raw):
        """Replace the job's stop-loss from raw input (None or {} removes it); InputError, nothing changed.
        A rule set on a running job judges the whole run so far; one set after it fired starts afresh."""
        rule = stoploss.parse(raw)
        self.stop_loss = {**rule, "from_step": 0} if rule else {}
        if self.status not in (Status.STOPPING, *ENDED):
            self.stop_loss_outcome = {}
        Job.objects.filter(pk=self.pk).update(stop_loss=self.stop_loss, stop_loss_outcome=self.stop_loss_outcome)
        return self.stop_loss

    def request_budget_stop(self, reason="spend reached the budget"):
        """End the job as budget_exhausted: at once when queued, else at its next step boundary
        (with a checkpoint, so it can resume once the budget is raised). Return False when
        the job had already ended."""
        if self.transition([Status.QUEUED], Status.BUDGET_EXHAUSTED, reason, finished_at=timezone.now()):
            return True
        changed = Job.objects.filter(pk=self.pk, status__in=ACTIVE).update(budget_stop_requested=True,
                                                                            stop_reason=reason)
        self.refresh_from_db()
        return bool(changed)

    def resume(self, by=None):
        """stopped, failed or budget_exhausted → queued, then (after commit) enqueue it again.

        The worker continues from the newest checkpoint. Return False when the
        job is in another state or a resume cannot help (see `resume_refusal`).
        """
        kind = kind_of(self)
        if kind.resume_refusal(self):
            return False  # its own process resumes it (an external run: start_run with the run's id)
        try:
            placement = kind.placement(self)  # None: it joins the line (trainer/queue.py) for its devices
        except InputError:
            return False  # nobody can run it now (resume_refusal says what the workers have)
        who = f" by {by}" if by else ""
        now = timezone.now()
        with transaction.atomic():
            # The error text stays in the history (the reason of the → failed change).
            # A stop-loss judges the resumed run from where it resumes: it spends the window again first.
            rule = {**self.stop_loss, "from_step": self.checkpoint_step or 0} if self.stop_loss else {}
            old = self.transition(RESUMABLE, Status.QUEUED, f"resumed{who}", where=Q(not_resumable_reason=""),
                                  stop_requested=False, budget_stop_requested=False, stop_reason="", interrupted_by="",
                                  finished_at=None, error="", placed_on=placement.worker if placement else "",
                                  stop_loss=rule, stop_loss_outcome={}, queued_at=now,
                                  placed_at=None if placement is None else now, waiting_for="", line_place=None)
            if old is None:
                return False
            if placement is None:
                kind.joined_line(self, now)
                self.refresh_from_db()
            else:
                kind.dispatch(self, placement)
        return True

    def finish(self, to, reason="", error="", not_resumable_reason=""):
        """running/stopping → an ended state. Return False when the job is no longer this worker's.

        `not_resumable_reason`: why resuming cannot help; written in the same UPDATE, so the
        announced status change already says the job cannot be resumed.
        """
        assert to in ENDED, to
        return self.transition(ACTIVE, to, reason or error, finished_at=timezone.now(), error=error,
                               stop_requested=False, budget_stop_requested=False, phase="",
                               not_resumable_reason=not_resumable_reason) is not None

    def beat(self):
        """Write the heartbeat. Return False when the job is no longer active (another party ended it)."""
        return bool(Job.objects.filter(pk=self.pk, status__in=ACTIVE).update(heartbeat_at=timezone.now()))

    @classmethod
    def fail_crashed(cls, limit_s, now=None):
        """Mark active jobs whose heartbeat is older than `limit_s` failed, ending their stints.

        The conditional UPDATE re-checks the heartbeat, so a worker that beat in
        between keeps its job. Return the jobs failed by this call.
        """
        now = now or timezone.now()
        cutoff = now - timedelta(seconds=limit_s)
        stale = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
        failed = []
        # Only a kind with a worker beats: an external run's silence marks it stale instead (tracking.kind).
        beating = Q(pk__in=[])
        for kind in kinds():
            if kind.worker_beats:
                beating |= Q(kind.beating(), source=kind.source)
        for job in cls.objects.filter(stale, beating, status__in=ACTIVE):
            last = job.heartbeat_at.strftime("%Y-%m-%d %H:%M:%S UTC") if job.heartbeat_at else "never"
            cause = f"stopped answering: last heartbeat {last}, more than {limit_s:g} s ago"
            # The worker was last known alive at its heartbeat: charge device time up to then.
            if job._fail_crashed(cause, alive_until=job.heartbeat_at or now, now=now, where=stale):
                failed.append(job)
        return failed

    def fail_worker_lost(self, pid, cause, now=None):
        """Fail this job now: the process `pid` that ran it is known dead (its Celery pool process exited).

        Waiting for the heartbeat check would leave it `running`, and unresumable, for minutes.
        Only a job whose open stint is that process is failed, so a late report cannot end a
        run that lives elsewhere. Return True when this call failed it.
        """
        now = now or timezone.now()
        mine = Q(stints__ended_at__isnull=True, stints__pid=pid, stints__node=settings.YARDSTICK_NODE)
        if not Job.objects.filter(mine, pk=self.pk).exists():
            return False
        # It was alive until its process was reaped, a moment ago: charge device time up to now.
        return self._fail_crashed(f"was lost: {cause}", alive_until=now, now=now, where=mine)

    def fail_lost_before_start(self, cause, now=None):
        """Fail this queued job: the pool process that took its message died before claiming it.

        The message was acknowledged (run_job acks late, without reject_on_worker_lost), so nothing
        would ever run it: it would stay `queued` for good. Failed, it can be resumed. Return True
        when this call failed it (a job some worker claimed meanwhile is left alone)."""
        now = now or timezone.now()
        error = f"the worker was lost before it started the job: {cause}; resume to start it"
        return self.transition((Status.QUEUED,), Status.FAILED, error, error=error, phase="", finished_at=now,
                               stop_requested=False, budget_stop_requested=False,
                               interrupted_by=f"its worker was lost before it started: {cause}") is not None

    def _fail_crashed(self, cause, alive_until, now, where):
        """The one rule for a job whose worker died: failed (resumable), its open stints ended
        `crashed` at `alive_until`, the error saying where it ran, why, and where a resume starts."""
        stint = self.stints.filter(ended_at__isnull=True).order_by("-started_at").first()
        ran_on = f" on {stint.node} (pid {stint.pid})" if stint else ""
        resume_from = (f"the checkpoint at step {self.checkpoint_step}" if self.checkpoint_step
                       else "the start (no checkpoint yet)")
        error = f"the worker{ran_on} {cause}; resume to continue from {resume_from}"
        with transaction.atomic():
            if not self.transition(ACTIVE, Status.FAILED, error, where=where, error=error, phase="",
                                   finished_at=now, stop_requested=False, budget_stop_requested=False,
                                   interrupted_by=f"its worker {cause}"):
                return False
            self.stints.filter(ended_at__isnull=True).update(
                ended_at=Greatest(F("started_at"), Value(alive_until, output_field=DateTimeField())),
                end_reason="crashed",
            )
            self.announce_stints()  # the status event went out with the stint still open
        self.refresh_from_db()
        return True

    # -- reading ------------------------------------------------------------

    @property
    def interrupted(self):
        """Ended by its worker's shutdown or death, not by its run or a person (`interrupted_by` says how)."""
        return self.status in (Status.STOPPED, Status.FAILED) and bool(self.interrupted_by)

    @property
    def steps_total(self):
        return (self.config or {}).get("steps", 0)

    @property
    def progress(self):
        """Fraction of the configured steps done, 0..1."""
        return min(1.0, self.steps_done / self.steps_total) if self.steps_total else 0.0

    @property
    def checkpoint_dir(self):
        return settings.DATA_DIR / "checkpoints" / f"job-{self.pk}"

    @property
    def kind(self):
        """The job's Kind (trainer.kinds): what its pages ask of what differs by kind."""
        return kind_of(self)

    @property
    def badge(self):
        """(text, title) of the badge beside the job's name, as its kind words it, or None."""
        return kind_of(self).badge(self)

    @property
    def status_note(self):
        """What the job's status alone does not say, as its kind words it ("" for nothing): the pages show it beside
        the status; a job waiting in the line says what for and its place."""
        if self.in_line and self.waiting_for:
            return self.waiting_for
        return kind_of(self).status_note(self)

    @property
    def in_line(self):
        """Whether it waits in the line for devices (trainer/queue.py): queued and not yet given any."""
        return self.status == Status.QUEUED and self.queued_at is not None and self.placed_at is None

    def waited_s(self, now=None):
        """Seconds it waited in the line for devices since it last joined (so far, while it waits); None when it
        never joined one (a job from before the line, an outside run)."""
        if self.queued_at is None:
            return None
        end = self.placed_at or (now or timezone.now() if self.in_line else self.queued_at)
        return max(0.0, (end - self.queued_at).total_seconds())

    # The one rule for which controls a job offers: the pages, the API and the live events ask these.

    @property
    def can_stop(self):
        return self.status in STOPPABLE

    @property
    def can_resume(self):
        return self.status in RESUMABLE and not self.not_resumable_reason and not kind_of(self).resume_refusal(self)

    def kept_checkpoint_steps(self):
        """Steps of the checkpoints this job keeps, oldest first (a Continue may start from any), as its kind
        knows them: its files here, or what a launch worker found on its node."""
        return kind_of(self).checkpoint_steps(self)

    @property
    def can_continue(self):
        return not self.continue_refusal()

    def continue_refusal(self):
        """Why no new job can continue from this one's policy, for people; empty when one can."""
        refusal = kind_of(self).continue_refusal(self)
        if refusal:
            return refusal
        if self.status not in ENDED:
            return f"job {self.pk} is {self.status}; only an ended job ({_either(ENDED)}) can be continued"
        if self.checkpoint_step is None or not self.kept_checkpoint_steps():
            return f"job {self.pk} has no checkpoint to continue from"
        return ""

    def stop_refusal(self):
        """Why a Stop did nothing to this job, for people; empty when it is stopping or can be stopped."""
        if self.status in STOPPABLE or self.status == Status.STOPPING:
            return ""
        return f"job {self.pk} is {self.status}; only a {_either(STOPPABLE)} job can be stopped"

    def resume_refusal(self):
        """Why this job cannot be resumed, for people; empty when it can."""
        kind = kind_of(self)
        refusal = kind.resume_refusal(self)
        if refusal:
            return refusal
        if self.status not in RESUMABLE:
            return f"job {self.pk} is {self.status}; only a {_either(RESUMABLE)} job can be resumed"
        if self.not_resumable_reason:
            return f"job {self.pk} cannot be resumed: {self.not_resumable_reason}"
        try:
            kind.placement(self)
        except InputError as err:
            return f"job {self.pk} cannot be resumed now: {err.message}"
        return ""

    def to_dict(self, detail=False):
        d = {
            "id": self.pk,
            "name": self.name,
            "team": self.team,
            "env": self.env,
            "source": self.source,
            "framework": self.framework,
            "status": self.status,
            "phase": self.phase,
            "device": self.device,
            "devices": self.devices,
            "node": self.node,
            "pool": self.pool,
            "placed_on": self.placed_on,
            "priority": Priority(self.priority).label,
            "queued_at": _iso(self.queued_at),
            "placed_at": _iso(self.placed_at),
            "in_line": self.in_line,
            "gpus": self.gpus,
            "line_place": self.line_place,
            "waiting_for": self.waiting_for,
            "waited_s": self.waited_s(),
            "budget_usd": None if self.budget_usd is None else str(self.budget_usd),
            "steps_done": self.steps_done,
            "steps": self.steps_total,
            "progress": round(self.progress, 4),
            "latest_reward_mean": self.latest_reward_mean,
            "baseline_pass1": self.baseline_pass1,
            "latest_pass1": self.latest_pass1,
            "error": self.error,
            "stop_requested": self.stop_requested,
            "can_stop": self.can_stop,
            "can_resume": self.can_resume,
            "not_resumable_reason": self.not_resumable_reason,
            "can_continue": self.can_continue,
            "init_from": self.init_from_id,
            "init_step": self.init_step,
            "stop_loss": self.stop_loss,
            "stop_loss_text": stoploss.describe(self.stop_loss),
            "stop_loss_outcome": self.stop_loss_outcome,
            "created_by": self.created_by.username if self.created_by_id else None,
            "created_at": _iso(self.created_at),
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "heartbeat_at": _iso(self.heartbeat_at),
        }
        if detail:
            d["config"] = self.config
            d["checkpoint_step"] = self.checkpoint_step
            d["status_changes"] = [c.to_dict() for c in self.status_changes.order_by("at", "id")]
            d["stints"] = [s.to_dict() for s in self.stints.order_by("started_at", "id")]
        return d


# The controls a person has over a job: the method that acts (by whom) and the one that says why it did not.
# The API and the pages both go through these.
CONTROLS = {"stop": (Job.request_stop, Job.stop_refusal), "resume": (Job.resume, Job.resume_refusal)}


class StatusChange(models.Model):
    """One transition of a job, with when and why."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="status_changes")
    from_status = models.CharField(max_length=20, blank=True, help_text="empty for creation")
    to_status = models.CharField(max_length=20)
    at = models.DateTimeField()
    reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["at", "id"]

    def to_dict(self):
        return {"from": self.from_status, "to": self.to_status, "at": _iso(self.at), "reason": self.reason}


class Stint(models.Model):
    """One uninterrupted stretch of a job on one device of one node.

    The cost engine charges device time (started_at..ended_at, or now while
    ended_at is null) and the device's energy over that window to the job.
    ended_at is set on every way out: completed, stopped, failed, budget
    exhausted, and crash detection (there: the last heartbeat).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="stints")
    node = models.CharField(max_length=255, help_text="the node it ran on (YARDSTICK_NODE), as its telemetry names it")
    # "cpu", or the GPU's UUID as NVML spells it ("GPU-8f3c..."), matching collector devices.
    device = models.CharField(max_length=100)
    device_name = models.CharField(max_length=100, blank=True, default="", help_text='e.g. "NVIDIA H200" or "cpu"')
    pid = models.IntegerField(help_text="worker process id on the node")
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=20, blank=True, default="")
    first_step = models.IntegerField(default=0, help_text="steps done when the stint began")
    last_step = models.IntegerField(null=True, blank=True, help_text="steps done when it ended")

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["device", "started_at"], name="trainer_stint_device")]

    def end(self, reason, steps_done=None):
        """Set ended_at now (once; a second call changes nothing)."""
        Stint.objects.filter(pk=self.pk, ended_at__isnull=True).update(
            ended_at=timezone.now(), end_reason=reason, last_step=steps_done
        )

    def to_dict(self):
        return {
            "node": self.node, "device": self.device, "device_name": self.device_name, "pid": self.pid,
            "started_at": _iso(self.started_at), "ended_at": _iso(self.ended_at), "end_reason": self.end_reason,
            "first_step": self.first_step, "last_step": self.last_step,
        }


def _finite(value):
    """`value` when it is a finite number (not a bool), else None: what a float column of a step may hold."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


class Step(models.Model):
    """One GRPO update's metrics (step 0: the baseline evaluation before any update).

    `metrics` holds every namespaced key the trainer reports (train/*,
    performance/*, timing/*, and eval/pass1 where evaluated); a few are copied
    to columns for queries and charts.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps")
    step = models.IntegerField()
    at = models.DateTimeField(default=timezone.now)
    metrics = models.JSONField(default=dict)
    reward_mean = models.FloatField(null=True, blank=True)
    eval_pass1 = models.FloatField(null=True, blank=True, help_text="points 0..100, where evaluated")
    gen_tokens = models.BigIntegerField(null=True, blank=True, help_text="tokens generated in this step")
    step_s = models.FloatField(null=True, blank=True, help_text="wall time of the step, eval and checkpoint included")

    class Meta:
        ordering = ["job", "step"]
        constraints = [models.UniqueConstraint(fields=["job", "step"], name="trainer_step_unique")]

    # Metrics also copied to columns of the row: read those, not the jsonb. Step.merge is the one writer.
    COLUMNS = {"train/reward_mean": "reward_mean", "eval/pass1": "eval_pass1",
               "performance/gen_tokens": "gen_tokens", "timing/step_s": "step_s"}

    @classmethod
    def merge(cls, job_id, step, metrics):
        """Write `metrics` (namespaced keys; JSON values) into the job's row for `step`, inserting it when
        there is none, and return the row's metrics as they now are.

        Every writer of the table comes here: the built-in trainer (one call a step, then its checkpoint
        time) and tracking (a run's batches, which may split one step). Keys already there and not in
        `metrics` are kept, so two batches at one step never lose each other's; each column of COLUMNS
        takes its metric's value when that is a finite number and keeps what it had otherwise.
        """
        row = {column: _finite(metrics.get(key)) for key, column in cls.COLUMNS.items()}
        if row["gen_tokens"] is not None:
            row["gen_tokens"] = int(row["gen_tokens"])
        columns, values = list(row), list(row.values())
        table = cls._meta.db_table
        keep = ", ".join(f"{c} = COALESCE(EXCLUDED.{c}, {table}.{c})" for c in columns)
        with connection.cursor() as cur:
            cur.execute(
                f"INSERT INTO {table} (job_id, step, at, metrics, {', '.join(columns)}) "
                f"VALUES (%s, %s, %s, %s::jsonb, {', '.join(['%s'] * len(columns))}) "
                f"ON CONFLICT (job_id, step) DO UPDATE SET metrics = {table}.metrics || EXCLUDED.metrics, {keep} "
                "RETURNING metrics",
                [job_id, step, timezone.now(), json.dumps(metrics), *values],
            )
            merged = cur.fetchone()[0]
        return merged if isinstance(merged, dict) else json.loads(merged)

    @classmethod
    def rescore(cls, job_id, score_of):
        """Set every step's score (eval/pass1, metric and column) of the job to `score_of(metrics)`, removing
        it where that is None (the job's score key changed). Call it inside a transaction."""
        for row in cls.objects.filter(job_id=job_id).select_for_update():
            pass1 = score_of(row.metrics)
            row.eval_pass1 = pass1
            row.metrics = {k: v for k, v in row.metrics.items() if k != "eval/pass1"}
            if pass1 is not None:
                row.metrics["eval/pass1"] = pass1
            row.save(update_fields=["eval_pass1", "metrics"])

    @classmethod
    def flops_totals(cls, job):
        """(mean reported MFU, how many steps reported one, model FLOPs, seconds) of the job's steps: MFU from
        performance/mfu; FLOPs and seconds summed over the steps that give both performance/model_flops and a
        positive timing/step_s. Sums are None when no step gives both."""
        with connection.cursor() as cur:
            cur.execute(f"""
                SELECT avg((metrics->>'performance/mfu')::float8), count(metrics->>'performance/mfu'),
                       sum((metrics->>'performance/model_flops')::float8) FILTER (WHERE timed),
                       sum((metrics->>'timing/step_s')::float8) FILTER (WHERE timed)
                FROM (SELECT metrics, metrics ? 'performance/model_flops'
                             AND (metrics->>'timing/step_s')::float8 > 0 AS timed
                      FROM {cls._meta.db_table} WHERE job_id = %s) s""", [job.pk])
            return cur.fetchone()

    def to_dict(self):
        return {"step": self.step, "at": _iso(self.at), "metrics": self.metrics}

    @classmethod
    def columns(cls, job, keys):
        """(steps, {key: [value or None per step]}) of the job's step metrics `keys`, oldest first.

        PostgreSQL picks each key out of the row's jsonb as a float: decoding
        2,000 whole metric dicts in Python costs twice as much.
        """
        picks = ", ".join(cls.COLUMNS[k] + "::float8" if k in cls.COLUMNS else "(metrics->>%s)::float8" for k in keys)
        with connection.cursor() as cur:
            cur.execute(f"SELECT step, {picks} FROM {cls._meta.db_table} WHERE job_id = %s ORDER BY step",
                        [*(k for k in keys if k not in cls.COLUMNS), job.pk])
            rows = cur.fetchall()
        return [r[0] for r in rows], {key: [r[i + 1] for r in rows] for i, key in enumerate(keys)}

    @classmethod
    def reward_sparks(cls, job_ids, points):
        """{job id: [(step, reward_mean) ...]} downsampled in SQL to at most `points` a job: every
        stride-th step (stride = steps done / points, rounded up) and the newest."""
        if not job_ids:
            return {}
        with connection.cursor() as cur:
            cur.execute(
                f"""
                SELECT s.job_id, s.step, s.reward_mean FROM {cls._meta.db_table} s
                JOIN {Job._meta.db_table} j ON j.id = s.job_id
                WHERE s.job_id = ANY(%s) AND s.step > 0
                  AND (s.step %% greatest(1, (j.steps_done + %s - 1) / %s) = 0 OR s.step = j.steps_done)
                ORDER BY s.job_id, s.step
                """,
                [list(job_ids), points, points],
            )
            out = {}
            for job_id, step, value in cur.fetchall():
                out.setdefault(job_id, []).append((step, value))
        return out


class Sample(models.Model):
    """A rollout kept for people to read: what the policy wrote at a step, and how it scored."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="samples")
    step = models.IntegerField()
    index = models.IntegerField()
    prompt = models.TextField()
    completion = models.TextField()
    reward = models.FloatField()
    advantage = models.FloatField()
    tool_calls = models.IntegerField(default=0)

    class Meta:
        ordering = ["job", "step", "index"]
        indexes = [models.Index(fields=["job", "step"], name="trainer_sample_step")]

    def to_dict(self):
        return {"step": self.step, "index": self.index, "prompt": self.prompt, "completion": self.completion,
                "reward": self.reward, "advantage": self.advantage, "tool_calls": self.tool_calls}


class TeamCap(models.Model):
    """At most `devices` devices of `kind` held at once by a team's jobs that wait in the line (trainer/queue.py): a
    job past it waits, saying so. Set by admins."""

    KINDS = {"cuda": "GPUs", "cpu": "cores"}

    team = models.CharField(max_length=TEAM_MAX)
    kind = models.CharField(max_length=10, choices=list(KINDS.items()))
    devices = models.PositiveIntegerField()
    set_by = models.CharField(max_length=150, blank=True, default="")
    set_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "kind"], name="trainer_teamcap_one_per_kind")]
        ordering = ["team", "kind"]

    def to_dict(self):
        return {"team": self.team, "kind": self.kind, "devices": self.devices, "set_by": self.set_by,
                "set_at": _iso(self.set_at)}


class Worker(models.Model):
    """A Celery worker as it last reported itself: the queues it consumes and the devices torch sees there.

    Written when the worker is ready and every REPORT_EVERY_S after (trainer/workers.py), deleted when
    it shuts down; `Job.start` refuses a device no live jobs worker has, naming what they do have.
    """

    REPORT_EVERY_S = 60
    # Older than this, the worker is taken for gone (killed outright: it could not say so).
    STALE_S = 3 * REPORT_EVERY_S

    name = models.CharField(max_length=255, unique=True, help_text='Celery node name, e.g. "jobs@host-a"')
    host = models.CharField(max_length=255, help_text="the node it runs on (YARDSTICK_NODE): its jobs' stints name it")
    queues = models.JSONField(default=list)
    devices = models.JSONField(default=list, help_text='what torch sees there, e.g. ["cpu", "cuda:0"]')
    team = models.CharField(max_length=TEAM_MAX, blank=True, default="",
                            help_text="the team pool it serves (YARDSTICK_POOL); empty: shared, any team's jobs")
    cores = models.PositiveIntegerField(default=0, help_text="CPU cores this worker may use")
    gpus = models.JSONField(default=list, help_text='[{"index", "uuid", "name", "memory_mib"}] of its CUDA devices')
    seen_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(default=timezone.now, help_text="when this worker's process reported first: a "
                                      "job placed on its name before then was placed on an earlier process, which "
                                      "never started it")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"worker {self.name} ({', '.join(self.devices)})"

    @classmethod
    def report(cls, name, host, queues, devices, team="", cores=0, gpus=(), started_at=None):
        """Write the worker's row; `started_at`: its process's start (trainer.workers.start_reporting gives it), else
        the row's is kept (now, for a new row)."""
        now = timezone.now()
        fields = {"host": host, "queues": list(queues), "devices": list(devices), "team": team, "cores": cores,
                  "gpus": list(gpus), "seen_at": now}
        if started_at is not None:
            fields["started_at"] = started_at
        return cls.objects.update_or_create(name=name, defaults=fields, create_defaults={"started_at": now, **fields})[0]

    def holds_no_job_placed(self, placed_at):
        """True when a job placed on this worker's name at `placed_at` cannot be this process's: it was placed
        before the process started (an earlier process under the same name took its message, or none did)."""
        return placed_at is not None and placed_at < self.started_at

    @classmethod
    def live(cls, queue=None, now=None):
        """Workers (on `queue`, if given) that reported within STALE_S."""
        cutoff = (now or timezone.now()) - timedelta(seconds=cls.STALE_S)
        live = cls.objects.filter(seen_at__gte=cutoff)
        return live if queue is None else live.filter(queues__contains=[queue])

    def to_dict(self):
        return {"name": self.name, "node": self.host, "pool": self.team, "queues": self.queues,
                "devices": self.devices, "cores": self.cores, "gpus": self.gpus, "seen_at": _iso(self.seen_at)}


# -- helpers ------------------------------------------------------------------


def _iso(dt):
    return dt.isoformat() if dt else None


def _either(statuses):
    """"a, b or c" of some statuses, for refusals that name the ones that would do."""
    names = [Status(s).value for s in statuses]
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]

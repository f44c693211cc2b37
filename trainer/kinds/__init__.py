"""Kinds of run: what differs between a job Yardstick trains itself, an outside run reporting through the
tracking API, and whatever kind comes next.

`trainer.models.Job` keeps what every job shares: its states, the transitions between them (one
conditional UPDATE each, claimed by row count), its history and its live events. What differs by kind
lives in one module per kind, behind `Kind`, found by the job's `source`:

    kind_of(job).resume_refusal(job)

A kind registers itself once, from its app's `ready()` (`register(Embedded())` in trainer/apps.py,
tracking's External in tracking/apps.py): trainer never imports the apps above it, so a kind defined
there is known to trainer only through this registry. docs/architecture.md says how to add one.
"""

from django.db.models import Q

from yardstick.inputs import InputError


class Kind:
    """One kind of run: how it starts and resumes, what it refuses and why, and what Yardstick holds of it.

    Subclasses set `source` (a `trainer.models.Source` value) and the two flags, and override what their
    jobs do differently; the defaults are those of a run Yardstick neither starts nor resumes.
    """

    source = ""
    # Yardstick holds the policy's checkpoints and evaluates it on its env itself: a Continue may start from
    # them, a campaign evaluates retention on the final one and fits its projection to the run's eval curve.
    holds_policy = False
    # A Yardstick worker beats (Job.beat) while it owns the job: Job.fail_crashed fails it when the beat stops.
    worker_beats = False
    # Its processes are found by what they report, so an operator may bind it to devices by hand on its page.
    binds_by_hand = False
    # Its MLflow run names it: a run renamed by its client (update_run, the mlflow.runName tag) renames the job.
    # Otherwise the job keeps the name a person (or Yardstick) gave it, and the run's name stays the run's.
    named_by_run = False

    def badge(self, job):
        """(text, title) of the badge the pages show beside the job's name, or None for no badge."""
        return None

    def start(self, **fields):
        """Create a job of this kind from what a person or an API client asked for and send it to run; raise
        InputError naming the first bad field (nothing is created then)."""
        raise InputError("source", f"Yardstick does not start {self.source} runs")

    def placement(self, job):
        """Where `job` would be sent to run now (trainer.workers.Placement: a queue and a worker), or None when it
        is to wait in the line for its devices (trainer/queue.py gives them); raise InputError naming what nobody can
        meet, however long it waited."""
        raise InputError("source", f"job {job.pk} is a {self.source} run: Yardstick does not send it anywhere")

    def wants(self, job):
        """What `job` waits in the line for (a trainer.queue.Want: devices of a kind, a count, a node, a pool), or None
        when it never waits: it is placed as it starts (`placement`), or by a scheduler of its own."""
        return None

    def wants_all(self, jobs):
        """{job id: what it waits for (or None)} of `jobs`, all of this kind: `wants` for each, unless a kind reads
        them all at once (the placer asks for a whole line)."""
        return {job.pk: self.wants(job) for job in jobs}

    def runs_on(self, worker):
        """Whether `worker` (a trainer.models.Worker) runs this kind's waiting jobs."""
        return False

    def joined_line(self, job, now):
        """`job` (re)joined the line (a Resume): the placer's pass, in the caller's transaction."""
        raise NotImplementedError(f"{self.source} jobs do not wait in the line")

    def place_at(self, job, worker, gpus, cores):
        """Give waiting `job` these devices of `worker` (GPUs by NVML index, or cores) and send it there once the
        transaction commits (the placer calls this, holding its lock)."""
        raise NotImplementedError(f"{self.source} jobs do not wait in the line")

    def dispatch(self, job, placement):
        """Send `job` to run at `placement` once the transaction commits."""
        raise NotImplementedError(f"{self.source} jobs are not dispatched by Yardstick")

    def worker_started(self, worker):
        """Worker `worker` (its name) has just reported, in a new process: its queued jobs placed on an earlier
        process under the same name are not held by this one, and go back to the line or to a worker (return them)."""
        return []

    def resume_refusal(self, job):
        """Why a Resume from Yardstick can never help this kind of job, for people; empty when its state decides."""
        return ""

    def status_note(self, job):
        """What a person must know that the job's status alone does not say, shown beside it in the Jobs list and
        the job's header (a launched job's cluster not answering, and since when); "" for nothing."""
        return ""

    def continue_refusal(self, job):
        """Why no job may continue from this kind's policy whatever its state, for people; empty when its state
        and checkpoints decide."""
        return ""

    def unmeasured(self, job_ids):
        """{job id: why, for people} of those of `job_ids` that are this kind's and ran where no agent measures (a
        launched job on a cluster's node no agent reports from): what they cost there cannot be known, so their cost
        reads "not measured", never $0.00 (costs.intelligence asks every kind). {} for none."""
        return {}

    def checkpoint_steps(self, job):
        """Steps of the checkpoints `job` keeps, oldest first, that a Continue may start from."""
        return []

    def beating(self):
        """A Q of the jobs of this kind a worker beats for (with `worker_beats`): all of them by default."""
        return Q()

    def held_on(self, workers):
        """{node: what this kind's active jobs hold there} for the nodes of `workers` (trainer.models.Worker rows):
        {"gpus": {NVML index: job id}, "cores": {job id: cores}}; a node's free devices are the rest
        (trainer.workers.free_devices). Nothing, for a kind whose jobs hold no worker's devices."""
        return {w.host: {"gpus": {}, "cores": {}} for w in workers}


_KINDS = {}


def register(kind):
    """Make `kind` the one that answers for jobs of `kind.source` (an app's ready() calls this once)."""
    _KINDS[kind.source] = kind
    return kind


def kind_of(job):
    """The Kind of `job`, by its source; LookupError when no app registered one for it."""
    try:
        return _KINDS[job.source]
    except KeyError:
        raise LookupError(f"no kind of run is registered for source {job.source!r} (job {job.pk}); "
                          f"registered: {', '.join(sorted(_KINDS)) or 'none'}") from None


def kind_for(source):
    """The Kind registered for `source`; LookupError when none is."""
    try:
        return _KINDS[source]
    except KeyError:
        raise LookupError(f"no kind of run is registered for source {source!r}; "
                          f"registered: {', '.join(sorted(_KINDS)) or 'none'}") from None


def kinds():
    """Every registered Kind."""
    return list(_KINDS.values())

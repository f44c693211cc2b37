"""External jobs: outside training runs (TRL, veRL, NeMo RL, ...) reporting through the tracking API.

The run's own process trains; Yardstick never enqueues, resumes or continues it. Its job is opened
running when the run is created (`open_job`), its status then follows the run's (`follow_run`), and a
run that logs nothing for a while is failed stale (`fail_stale_runs`) until it logs again
(`revive_stale`). Registered with trainer's kinds from tracking/apps.py: trainer never imports tracking.
"""

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from trainer.kinds import Kind
from trainer.models import ACTIVE, ENDED, ENV_MAX, NAME_MAX, TEAM_MAX, Job, Source, Status

# An external job's status follows its MLflow run's (tracking.Run): RUNNING, FINISHED, FAILED, KILLED.
RUN_STATUS_TO_JOB = {"RUNNING": Status.RUNNING, "FINISHED": Status.COMPLETED, "FAILED": Status.FAILED,
                     "KILLED": Status.STOPPED}


class External(Kind):
    source = Source.EXTERNAL
    holds_policy = False  # its checkpoints are on the run's own disks, its score is what it logs
    worker_beats = False  # no worker beats: its logs write the heartbeat, and silence marks it stale
    binds_by_hand = True  # a run without the client package in its environment is matched to no GPU by itself
    named_by_run = True  # nobody named it but its client: the job is called what its run is called

    def badge(self, job):
        said = f"; its tags or params say {job.framework}" if job.framework else ""
        return (f"external · {job.framework}" if job.framework else "external",
                f"an outside training run reporting through the MLflow tracking API{said}")

    def resume_refusal(self, job):
        return (f"job {job.pk} is an external run: restart its training with MLFLOW_RUN_ID set to the run's "
                "id to continue it")

    def continue_refusal(self, job):
        return f"job {job.pk} is an external run: its checkpoints are not Yardstick's to load"


EXTERNAL = External()


def open_job(*, name, team, env="external", framework="", created_by=None):
    """Create the running job of an outside training run (tracking.Run creates it): it is never
    enqueued, no worker claims it, and its status then follows the run (`follow_run`)."""
    now = timezone.now()
    return Job.open(
        reason=f"run reported by {created_by}" if created_by else "run reported",
        name=name[:NAME_MAX], team=team[:TEAM_MAX], env=env[:ENV_MAX], config={}, device="external",
        source=EXTERNAL.source, framework=framework[:50], status=Status.RUNNING, created_by=created_by,
        created_at=now, started_at=now, heartbeat_at=now,
    )


def follow_run(job, run_status, reason=""):
    """Move an external job to what its MLflow run's status says (RUN_STATUS_TO_JOB; others change
    nothing). A run set RUNNING again (resumed by its id) reopens an ended job. Return True when
    the job changed."""
    to = RUN_STATUS_TO_JOB.get(run_status)
    if to is None or job.source != EXTERNAL.source:
        return False
    now = timezone.now()
    if to == Status.RUNNING:
        return job.transition(ENDED, Status.RUNNING, reason or "run resumed", heartbeat_at=now,
                              finished_at=None, error="", stop_requested=False, stop_reason="") is not None
    reason = reason or f"run ended {run_status}"
    if to == Status.COMPLETED and job.stop_requested:
        # Stopped from Yardstick: transformers' MLflowCallback ends its run FINISHED on the
        # StopCallback's stop (and the callback then sets it KILLED); the job stopped either way.
        to = Status.STOPPED
        reason = f"stopped as asked ({reason})"
    if to == Status.STOPPED and job.stop_reason:
        reason = f"{job.stop_reason} ({reason})"
    fields = dict(finished_at=now, error=reason if to == Status.FAILED else "", stop_requested=False,
                  budget_stop_requested=False, phase="")
    if job.transition(ACTIVE, to, reason, **fields) is not None:
        return True
    # A run marked stale that then ends on its own ends as it says.
    return job.transition([Status.FAILED], to, reason, where=Q(error__startswith="stale:"), **fields) is not None


def fail_stale_runs(limit_s, now=None):
    """Mark external jobs whose run logged nothing for `limit_s` failed ("stale: ..."); a later log
    puts them back to running (`revive_stale`). Return the jobs failed by this call."""
    now = now or timezone.now()
    stale = Q(heartbeat_at__lt=now - timedelta(seconds=limit_s)) | Q(heartbeat_at__isnull=True)
    failed = []
    for job in Job.objects.filter(stale, source=EXTERNAL.source, status__in=ACTIVE):
        silent_s = (now - job.heartbeat_at).total_seconds() if job.heartbeat_at else limit_s
        error = f"stale: no metric for {silent_s:.0f} s (YARDSTICK_RUN_STALE_S is {limit_s:g})"
        if job.transition(ACTIVE, Status.FAILED, error, where=stale, error=error, finished_at=now):
            failed.append(job)
    return failed


def revive_stale(job):
    """A stale external job (failed for silence) logs again: back to running. Return True when it did."""
    return job.transition([Status.FAILED], Status.RUNNING, "logging again after going stale",
                          where=Q(source=EXTERNAL.source, error__startswith="stale:"),
                          heartbeat_at=timezone.now(), finished_at=None, error="") is not None

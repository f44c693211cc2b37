"""The `sweep` alert kind: what a team leaving a sweep to run for a week wants to hear of. For each sweep (scope:
a team or `sweep:<id>`), three notices, each its own alert:

- `sweep:<id>:ended`: the sweep ended, why, and its best trial per dollar;
- `sweep:<id>:stalled`: a sweep still running, under its budget, where no trial (nor its shared setup) started or
  ended for the rule's duration in minutes (default 60): a line that never frees a GPU, a worker gone;
- `sweep:<id>:failures`: two or more of its trials failed (interruptions by a restart are no failure).

Sweeps that ended before the rule existed are history, not news. Registered from sweeps/apps.py (alerts sits below
sweeps and reads nothing of it but through this registration)."""

from django.db.models import Max
from django.db.models.functions import Coalesce, Greatest

from alerts import conditions
from alerts.models import Kind, register_kind
from sweeps.models import State, Sweep, SweepTrial
from trainer.models import Job, Status

KIND = "sweep"
SPEC = Kind("Sweep notices", None, "stalled: no trial started or ended for this many minutes", "minutes",
            ("team", "sweep"), 60)


def breaches(rule, now):
    prefix, value = rule.scope_parts()
    sweeps = Sweep.objects.exclude(state=State.ENDED, ended_at__lt=rule.created_at)
    if prefix == "team":
        sweeps = sweeps.filter(team=value)
    elif prefix == "sweep":
        sweeps = sweeps.filter(pk=value)
    out = {}
    for sweep in sweeps:
        name = f"sweep {sweep.pk} {sweep.name!r} ({sweep.team})"
        if sweep.state == State.ENDED:
            out[f"sweep:{sweep.pk}:ended"] = (None, f"{name} ended: {sweep.reason or sweep.why or 'done'}")
        else:
            last = _last_move(sweep)
            idle_min = (now - last).total_seconds() / 60 if last else None
            if idle_min is not None and idle_min >= rule.duration and sweep.state == State.RUNNING:
                out[f"sweep:{sweep.pk}:stalled"] = (round(idle_min, 1), (
                    f"{name} has started and ended no trial for {idle_min:.0f} min, under its budget: are its trials "
                    f"waiting for devices, or its workers gone?"))
        failed = list(SweepTrial.objects.filter(sweep=sweep, job__status=Status.FAILED, job__interrupted_by="")
                      .order_by("number").values_list("number", "job__error"))
        if len(failed) >= 2:
            numbers = ", ".join(str(n) for n, _ in failed)
            out[f"sweep:{sweep.pk}:failures"] = (len(failed), (
                f"{name}: {len(failed)} trials failed ({numbers}); the last: {failed[-1][1] or 'no error kept'}"))
    return out


def _last_move(sweep):
    """When a trial of the sweep (or its setup) last started or ended: the newest of their jobs' creation, start and
    end; the sweep's creation when it has none."""
    jobs = list(SweepTrial.objects.filter(sweep=sweep).values_list("job_id", flat=True))
    if sweep.setup_job_id:
        jobs.append(sweep.setup_job_id)
    newest = Job.objects.filter(pk__in=jobs).aggregate(
        at=Max(Greatest(Coalesce("finished_at", "created_at"), Coalesce("started_at", "created_at"),
                        "created_at")))["at"] if jobs else None
    return max(filter(None, [newest, sweep.created_at]), default=None)


def register():
    """Make `sweep` a rule kind (SweepsConfig.ready calls this once)."""
    register_kind(KIND, SPEC)
    conditions.register(KIND, breaches)

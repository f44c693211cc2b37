"""Play a node's clock for a sweep's gated trials (tests/sweeps/surface_script.py --gate): each trial waiting at a
gate is charged the steps it logged (tests/sweeps/bill.py), the sweep takes a pass (as it would once attribution
caught up), then the trial is let go unless the pass asked it to stop."""

from tests.sweeps.bill import bill
from tests.waiting import wait_for
from trainer.models import ENDED, Job, Status


def drive(sweep, gate, until, timeout_s=90, call=lambda fn: fn(), serve=lambda number: True, in_order=False):
    """Until `until(sweep)`; `call(fn)` runs each pass (a browser test runs them in a thread of their own); only the
    trials whose number `serve` takes are charged and let go (the others wait at their gate, charged nothing).
    `in_order`: only the lowest-numbered trial not ended is served, so each trial is judged with every earlier one
    ended (trials at once still start together, and wait)."""
    released = set()

    def step():
        trials = [t for t in sweep.trials.select_related("job").order_by("number") if t.job.status not in ENDED]
        for trial in trials[:1] if in_order else trials:
            job = trial.job
            if not serve(trial.number):
                continue
            waiting = [line for line in job.output_lines.values_list("text", flat=True) if line.startswith("waiting")]
            for line in waiting:
                at = int(line.split()[-1])
                if (job.pk, at) in released:
                    continue
                bill(job)
                call(sweep.advance)
                if Job.objects.get(pk=job.pk).status == Status.RUNNING:  # not asked to stop by the pass
                    (gate / f"{job.pk}-{at}").touch()
                released.add((job.pk, at))
        call(sweep.advance)
        sweep.refresh_from_db()
        return until(sweep)

    return wait_for(step, timeout_s=timeout_s, what=lambda: (
        f"the sweep: {sweep.state} {sweep.reason}; trials: "
        f"{[(t.number, t.job_id, t.job.status, t.params) for t in sweep.trials.select_related('job')]}"))

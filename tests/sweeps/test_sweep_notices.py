"""The `sweep` alert kind (sweeps/notices.py): a notice when a sweep stalls (no trial started or ended for the
rule's minutes, under its budget), when two of its trials failed (a restart's interruption is no failure), and when
it ends; each its own alert, on the real database, through the alerts' own evaluation."""

import json
from datetime import timedelta

from django.utils import timezone

from alerts.evaluate import evaluate
from alerts.models import Alert, AlertRule
from launch.models import Recipe
from sweeps.models import Sweep
from trainer.models import Job, Status, Worker

PARAMS = [{"name": "lr", "kind": "float", "default": 1e-3, "minimum": 1e-7, "maximum": 1.0}]


def test_a_sweep_that_stalls_loses_two_trials_and_ends_says_so_each_time(db, admin_user, operator, client):
    Recipe.define("train", {"argv": ["python", "train.py", "--lr", "{lr}"], "params": PARAMS,
                            "devices": {"kind": "cpu", "count": 1}, "score_key": "eval/pass1"}, admin_user)
    Worker.report("launch@cpu-a", "cpu-a", ["launch@cpu-a"], ["cpu"], cores=8)
    rule = AlertRule.create({"name": "sweeps", "kind": "sweep", "duration": 30, "scope": "team:research"})
    assert AlertRule.create({"name": "one", "kind": "sweep", "scope": "sweep:7"}).scope == "sweep:7"
    client.force_login(operator)
    body = {"name": "week", "team": "research", "recipe": "train", "space": {"lr": {"low": 1e-5, "high": 1e-2}},
            "objective": "per_dollar", "budget_usd": "10", "parallel": 2, "max_trials": 4}
    sweep = Sweep.objects.get(pk=client.post("/api/sweeps", json.dumps(body), content_type="application/json")
                              .json()["id"])
    now = timezone.now()

    def firing():
        return {a.subject: a.message for a in Alert.objects.firing().filter(rule=rule)}

    evaluate(now + timedelta(minutes=10))
    assert firing() == {}, "10 minutes without a move is not a stall of 30"
    evaluate(now + timedelta(minutes=31))
    assert list(firing()) == [f"sweep:{sweep.pk}:stalled"]
    assert "has started and ended no trial for 31 min, under its budget" in firing()[f"sweep:{sweep.pk}:stalled"]

    trials = list(sweep.trials.select_related("job").order_by("number"))
    interrupted, failed = trials
    assert interrupted.job.claim() and failed.job.claim()
    Job.objects.filter(pk=interrupted.job_id).update(status=Status.FAILED, interrupted_by="its worker stopped")
    assert failed.job.finish(Status.FAILED, error="CUDA out of memory")
    evaluate(timezone.now())
    assert f"sweep:{sweep.pk}:failures" not in firing(), "an interrupted trial is no failure"
    sweep.advance()  # the interrupted one runs again as trial 2; trial 3 starts in the failed one's slot
    third = sweep.trials.get(number=3).job
    assert third.claim() and third.finish(Status.FAILED, error="segfault")
    evaluate(timezone.now())
    assert firing()[f"sweep:{sweep.pk}:failures"].endswith("2 trials failed (1, 3); the last: segfault")
    assert f"sweep:{sweep.pk}:stalled" not in firing(), "trials moved: resolved"

    sweep.stop(by=operator)
    evaluate(timezone.now())
    assert firing()[f"sweep:{sweep.pk}:ended"] == f"sweep {sweep.pk} 'week' (research) ended: stopped by {operator}"

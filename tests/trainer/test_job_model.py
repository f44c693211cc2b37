"""Job: every transition is one conditional UPDATE claimed by its row count, and leaves a history row."""

from datetime import timedelta

import pytest
from django.utils import timezone

from trainer.models import Job, StatusChange, Stint
from yardstick.inputs import InputError


def history(job):
    return list(StatusChange.objects.filter(job=job).values_list("from_status", "to_status"))


def test_a_second_claim_gets_nothing(make_job):
    job = make_job()
    other_worker_view = Job.objects.get(pk=job.pk)
    assert job.claim() is True
    assert other_worker_view.claim() is False
    assert Job.objects.get(pk=job.pk).status == "running"
    assert history(job) == [("", "queued"), ("queued", "running")]


def test_claiming_sets_the_heartbeat_and_first_start(make_job):
    job = make_job()
    job.claim()
    assert job.heartbeat_at is not None and job.started_at is not None


def test_a_cancelled_job_cannot_be_claimed(make_job):
    job = make_job()
    stale = Job.objects.get(pk=job.pk)
    assert job.request_stop() is True
    assert stale.claim() is False
    assert Job.objects.get(pk=job.pk).status == "stopped"
    assert history(job) == [("", "queued"), ("queued", "stopped")]


def test_stopping_a_running_job_sets_the_flag_and_waits_for_the_worker(make_job):
    job = make_job()
    job.claim()
    assert job.request_stop() is True
    assert (job.status, job.stop_requested) == ("stopping", True)
    assert job.request_stop() is True, "asking again is fine"
    assert history(job)[-1] == ("running", "stopping")
    assert len(history(job)) == 3


def test_finish_happens_once(make_job):
    job = make_job()
    job.claim()
    assert job.finish("completed", "done") is True
    assert Job.objects.get(pk=job.pk).finish("failed", error="late") is False
    job.refresh_from_db()
    assert job.status == "completed" and job.error == "" and job.finished_at is not None


def test_only_an_ended_job_can_be_resumed(make_job):
    job = make_job()
    assert job.resume() is False
    job.claim()
    assert job.resume() is False
    job.finish("failed", error="boom")
    assert job.resume() is True
    assert job.status == "queued" and job.error == "" and job.finished_at is None
    job.claim()
    job.finish("completed")
    assert job.resume() is False


def test_a_budget_stop_ends_a_queued_job_at_once(make_job):
    job = make_job()
    assert job.request_budget_stop() is True
    assert job.status == "budget_exhausted"


def test_a_budget_stop_flags_a_running_job_for_its_next_step_boundary(make_job):
    job = make_job()
    job.claim()
    assert job.request_budget_stop() is True
    job.refresh_from_db()
    assert job.status == "running" and job.budget_stop_requested
    job.finish("completed")
    assert job.request_budget_stop() is False


def test_the_crash_detector_fails_only_jobs_with_a_stale_heartbeat(make_job):
    stale, fresh, queued = make_job(), make_job(), make_job()
    for job in (stale, fresh):
        job.claim()
        Stint.objects.create(job=job, node="n1", device="cpu", pid=42)
    long_ago = timezone.now() - timedelta(seconds=300)
    Job.objects.filter(pk=stale.pk).update(heartbeat_at=long_ago, checkpoint_step=2)

    failed = Job.fail_crashed(limit_s=120)

    assert [j.pk for j in failed] == [stale.pk]
    stale.refresh_from_db()
    assert stale.status == "failed"
    assert "the worker on n1 (pid 42) stopped answering" in stale.error
    assert "resume to continue from the checkpoint at step 2" in stale.error
    stint = Stint.objects.get(job=stale)
    assert stint.ended_at is not None and stint.end_reason == "crashed"
    assert Job.objects.get(pk=fresh.pk).status == "running"
    assert Stint.objects.get(job=fresh).ended_at is None
    assert Job.objects.get(pk=queued.pk).status == "queued"
    assert Job.fail_crashed(limit_s=120) == [], "a second pass finds nothing more"


@pytest.mark.parametrize("kwargs, field", [
    ({"env": "chess"}, "env"),
    ({"config": {"steps": -1}}, "config.steps"),
    ({"config": {"env": "toolcalc"}}, "config.env"),
    ({"budget_usd": float("nan")}, "budget_usd"),
    ({"budget_usd": True}, "budget_usd"),
    ({"name": "x" * 201}, "name"),
    ({"device": "cuda:x"}, "device"),
])
def test_start_rejects_bad_input_and_creates_nothing(db, data_dir, kwargs, field):
    args = {"name": "n", "team": "t", "env": "arithmetic", **kwargs}
    with pytest.raises(InputError) as caught:
        Job.start(**args, enqueue=False)
    assert caught.value.field == field
    assert Job.objects.count() == 0

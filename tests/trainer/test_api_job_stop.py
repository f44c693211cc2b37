"""POST /api/jobs/<id>/stop: operators stop jobs; the answer never waits on the worker."""

import pytest

from trainer.models import Job, StatusChange


def test_a_queued_job_is_cancelled_at_once(operator, client, make_job):
    job = make_job()
    client.force_login(operator)
    resp = client.post(f"/api/jobs/{job.pk}/stop")
    assert resp.status_code == 200
    assert resp.json()["status"] == "stopped"
    job.refresh_from_db()
    assert job.status == "stopped" and job.finished_at is not None
    change = StatusChange.objects.filter(job=job).last()
    assert (change.from_status, change.to_status) == ("queued", "stopped")
    assert change.reason == "cancelled before it started by otto"


def test_a_running_job_is_asked_to_stop(operator, client, make_job):
    job = make_job()
    assert job.claim()
    client.force_login(operator)
    resp = client.post(f"/api/jobs/{job.pk}/stop")
    assert resp.status_code == 200
    assert resp.json()["status"] == "stopping"
    job.refresh_from_db()
    assert job.status == "stopping" and job.stop_requested


@pytest.mark.parametrize("ended", ["completed", "failed", "stopped", "budget_exhausted"])
def test_an_ended_job_is_a_409_with_its_status(operator, client, make_job, ended):
    job = make_job()
    Job.objects.filter(pk=job.pk).update(status=ended)
    client.force_login(operator)
    resp = client.post(f"/api/jobs/{job.pk}/stop")
    assert resp.status_code == 409
    assert resp.json()["status"] == ended
    assert f"job {job.pk} is {ended}; only a queued or running job can be stopped" == resp.json()["error"]
    assert Job.objects.get(pk=job.pk).status == ended


@pytest.mark.parametrize("role, status", [("anonymous", 401), ("viewer", 403), ("operator", 200), ("admin", 200)])
def test_stopping_needs_the_operator_role(request, client, make_job, role, status):
    job = make_job()
    if role != "anonymous":
        client.force_login(request.getfixturevalue({"admin": "admin_user"}.get(role, role)))
    assert client.post(f"/api/jobs/{job.pk}/stop").status_code == status
    assert Job.objects.get(pk=job.pk).status == ("stopped" if status == 200 else "queued")


def test_stop_is_a_post(operator, client, make_job):
    job = make_job()
    client.force_login(operator)
    assert client.get(f"/api/jobs/{job.pk}/stop").status_code == 405
    assert Job.objects.get(pk=job.pk).status == "queued"


def test_an_unknown_job_is_a_404(operator, client):
    client.force_login(operator)
    assert client.post("/api/jobs/999999/stop").status_code == 404

"""POST /api/jobs/<id>/resume: a stopped, failed or budget-exhausted job goes back in the queue."""

import pytest

from trainer.models import Job, StatusChange


@pytest.mark.parametrize("ended", ["stopped", "failed", "budget_exhausted"])
def test_an_ended_job_is_queued_again(operator, client, make_job, ended, django_capture_on_commit_callbacks):
    job = make_job()
    Job.objects.filter(pk=job.pk).update(status=ended, error="boom", stop_requested=True, budget_stop_requested=True)
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = client.post(f"/api/jobs/{job.pk}/resume")
    assert resp.status_code == 200
    assert resp.json()["status"] == "queued"
    job.refresh_from_db()
    assert job.status == "queued" and not job.stop_requested and not job.budget_stop_requested
    change = StatusChange.objects.filter(job=job).last()
    assert (change.from_status, change.to_status, change.reason) == (ended, "queued", "resumed by otto")
    # The task is enqueued after commit (and the status change is published then too).
    assert len(callbacks) >= 1


@pytest.mark.parametrize("state", ["queued", "running", "stopping", "completed"])
def test_a_job_in_another_state_is_a_409_with_its_status(operator, client, make_job, state):
    job = make_job()
    Job.objects.filter(pk=job.pk).update(status=state)
    client.force_login(operator)
    resp = client.post(f"/api/jobs/{job.pk}/resume")
    assert resp.status_code == 409
    assert resp.json() == {
        "error": f"job {job.pk} is {state}; only a stopped, failed or budget_exhausted job can be resumed",
        "status": state,
    }
    assert Job.objects.get(pk=job.pk).status == state


@pytest.mark.parametrize("role, status", [("anonymous", 401), ("viewer", 403), ("operator", 200), ("admin", 200)])
def test_resuming_needs_the_operator_role(request, client, make_job, role, status):
    job = make_job()
    job.request_stop()
    if role != "anonymous":
        client.force_login(request.getfixturevalue({"admin": "admin_user"}.get(role, role)))
    assert client.post(f"/api/jobs/{job.pk}/resume").status_code == status
    assert Job.objects.get(pk=job.pk).status == ("queued" if status == 200 else "stopped")


def test_a_job_that_failed_for_a_missing_device_is_a_409_saying_why_a_resume_cannot_help(operator, client, make_job):
    job = make_job()
    Job.objects.filter(pk=job.pk).update(status="failed", error="DeviceUnavailable: device cuda was requested but ...",
                                         not_resumable_reason="its device cuda is not on the worker that ran it")
    client.force_login(operator)
    assert client.get(f"/api/jobs/{job.pk}").json()["can_resume"] is False
    resp = client.post(f"/api/jobs/{job.pk}/resume")
    assert resp.status_code == 409
    assert resp.json() == {"error": f"job {job.pk} cannot be resumed: its device cuda is not on the worker that ran it",
                           "status": "failed"}
    assert Job.objects.get(pk=job.pk).status == "failed"

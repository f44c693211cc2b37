"""The jobs page: the table, and the Start / Stop / Resume controls for operators only."""

import pytest

from trainer.models import Job, StatusChange
from tests.dashboard import builders as b


def test_it_lists_jobs_with_progress_sparkline_cost_and_ipd(viewer_client):
    job = b.job(name="grpo-a", steps_total=100)
    b.steps(job, 20)
    resp = viewer_client.get("/jobs/")
    assert resp.status_code == 200
    row = resp.context["rows"][0]
    assert row["job"].pk == job.pk and row["progress_pct"] == 20.0
    assert row["spark"].count(",") >= 10, "a sparkline of the reward"
    assert row["ipd_state"] == "no cost yet", "no device time charged yet: no IPD, never a division by zero"
    html = resp.content.decode()
    assert "#%d grpo-a" % job.pk in html and 'value="20"' in html


def test_the_sparkline_keeps_at_most_spark_points_steps_across_the_whole_run_for_the_page_to_extend(viewer_client):
    import json

    from dashboard.readings import SPARK_POINTS

    job = b.job(name="long", steps_total=200)
    b.steps(job, 79)  # 79 steps: every 2nd (39 points) and the newest
    row = viewer_client.get("/jobs/").context["rows"][0]
    points = json.loads(row["spark_points"])
    assert [s for s, _ in points] == list(range(2, 79, 2)) + [79]
    assert len(points) <= SPARK_POINTS and points[-1][1] == pytest.approx(0.3 + 0.002 * 79)
    assert len(row["spark"].split()) == len(points), "the same points are drawn"


def test_a_viewer_sees_no_start_stop_or_resume(viewer_client):
    b.job(status="running")
    b.job(status="stopped")
    html = viewer_client.get("/jobs/").content.decode()
    assert "Start a job" not in html and "■ Stop" not in html and "▶ Resume" not in html


def test_an_operator_sees_stop_for_running_and_resume_for_stopped(operator_client):
    running, stopped = b.job(status="running"), b.job(status="stopped")
    html = operator_client.get("/jobs/").content.decode()
    assert "Start a job" in html
    assert f'action="/jobs/{running.pk}/stop" class="inline" data-show-when="queued,running">' in html
    assert f'action="/jobs/{stopped.pk}/resume" class="inline" data-show-when="stopped,failed,budget_exhausted">' in html


def test_stop_asks_the_job_to_stop_and_records_who(operator_client, operator):
    job = b.job(status="running")
    resp = operator_client.post(f"/jobs/{job.pk}/stop", {"next": "/jobs/"})
    assert resp.status_code == 302 and resp["Location"] == "/jobs/"
    job.refresh_from_db()
    assert job.status == "stopping" and job.stop_requested
    assert StatusChange.objects.filter(job=job, to_status="stopping", reason__contains=operator.username).exists()


def test_resume_queues_a_stopped_job_again(operator_client, django_capture_on_commit_callbacks):
    job = b.job(status="stopped")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = operator_client.post(f"/jobs/{job.pk}/resume")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}"
    job.refresh_from_db()
    assert job.status == "queued"
    assert len(callbacks) >= 1, "the run is enqueued after commit"


def test_a_viewer_cannot_stop_by_posting_either(viewer_client):
    job = b.job(status="running")
    assert viewer_client.post(f"/jobs/{job.pk}/stop").status_code == 403
    job.refresh_from_db()
    assert job.status == "running"


def test_stop_needs_the_csrf_token(operator):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    job = b.job(status="running")
    assert client.post(f"/jobs/{job.pk}/stop").status_code == 403
    assert Job.objects.get(pk=job.pk).status == "running"

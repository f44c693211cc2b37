"""The jobs page: the table, and the Start / Stop / Resume controls for operators only."""

from html.parser import HTMLParser

import pytest

from tests.dashboard import builders as b
from trainer.models import Job, StatusChange


def test_it_lists_jobs_with_progress_sparkline_cost_and_ipd(viewer_client):
    job = b.job(name="grpo-a", steps_total=100)
    b.steps(job, 20)
    resp = viewer_client.get("/jobs")
    assert resp.status_code == 200
    row = resp.context["rows"][0]
    assert row["job"].pk == job.pk and row["progress_pct"] == 20.0
    assert row["spark"].count(",") >= 10, "a sparkline of the reward"
    assert row["ipd_state"] == "no cost yet", "no device time charged yet: no IPD, never a division by zero"
    html = resp.content.decode()
    assert "#%d grpo-a" % job.pk in html and 'value="20"' in html


def test_a_job_nothing_was_charged_for_yet_reads_the_same_in_the_list_as_on_its_page(viewer_client):
    job = b.job(name="fresh", steps_total=40)
    b.steps(job, 3)
    row = viewer_client.get("/jobs").context["rows"][0]
    intel = viewer_client.get(f"/jobs/{job.pk}").context["intel"]
    assert (row["cost_usd"], row["ipd"], row["ipd_state"]) == \
        (intel["cost_usd"], intel["ipd_points_per_usd"], intel["state"]) == ("0.00", None, "no cost yet")


def test_the_sparkline_keeps_at_most_spark_points_steps_across_the_whole_run_for_the_page_to_extend(viewer_client):
    import json

    from dashboard.readings import SPARK_POINTS

    job = b.job(name="long", steps_total=200)
    b.steps(job, 79)  # 79 steps: every 2nd (39 points) and the newest
    row = viewer_client.get("/jobs").context["rows"][0]
    points = json.loads(row["spark_points"])
    assert [s for s, _ in points] == list(range(2, 79, 2)) + [79]
    assert len(points) <= SPARK_POINTS and points[-1][1] == pytest.approx(0.3 + 0.002 * 79)
    assert len(row["spark"].split()) == len(points), "the same points are drawn"


def test_a_viewer_sees_no_start_stop_or_resume(viewer_client):
    b.job(status="running")
    b.job(status="stopped")
    html = viewer_client.get("/jobs").content.decode()
    assert "Start a job" not in html and "■ Stop" not in html and "▶ Resume" not in html


class _Forms(HTMLParser):
    """Every <form> of a page: its attributes, the controls box it sits in, and how many forms enclose it."""

    def __init__(self):
        super().__init__()
        self.forms, self.open_forms, self.box = [], 0, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-job-controls" in attrs:
            self.box = attrs["data-job-controls"]
        if tag == "form":
            self.forms.append({**attrs, "enclosed_by": self.open_forms, "box": self.box})
            self.open_forms += 1

    def handle_endtag(self, tag):
        if tag == "form":
            self.open_forms -= 1


def forms_of(html):
    parser = _Forms()
    parser.feed(html)
    return parser.forms


def shown_controls(html, job):
    """{"stop": shown?, "resume": shown?} for the job's controls box."""
    mine = [f for f in forms_of(html) if f["box"] == str(job.pk)]
    return {kind: "hidden" not in next(f for f in mine if f"job-{kind}-form" in f["class"].split())
            for kind in ("stop", "resume")}


def test_an_operator_gets_both_controls_of_each_job_with_what_its_state_forbids_hidden(operator_client):
    running, queued, stopped = b.job(status="running"), b.job(status="queued"), b.job(status="stopped")
    completed, stopping = b.job(status="completed"), b.job(status="stopping")
    dead_end = b.job(status="failed")
    Job.objects.filter(pk=dead_end.pk).update(not_resumable_reason="its device cuda is not on the worker that ran it")
    html = operator_client.get("/jobs").content.decode()
    assert "Start a job" in html
    assert shown_controls(html, running) == shown_controls(html, queued) == {"stop": True, "resume": False}
    assert shown_controls(html, stopped) == {"stop": False, "resume": True}
    assert shown_controls(html, completed) == shown_controls(html, stopping) == {"stop": False, "resume": False}
    assert shown_controls(html, dead_end) == {"stop": False, "resume": False}
    assert "cannot be resumed: its device cuda is not on the worker that ran it" in html
    assert "{#" not in html and "#}" not in html, "no template comment leaks onto the page"


def test_no_form_on_the_page_sits_inside_another_and_compare_sends_no_token(operator_client):
    for status in ("running", "completed", "stopped"):
        b.job(status=status)
    forms = forms_of(operator_client.get("/jobs").content.decode())
    assert len(forms) >= 1 + 3 * 2 + 1, "start, a stop and a resume per job, compare"
    assert [f for f in forms if f["enclosed_by"]] == []
    compare = next(f for f in forms if f.get("id") == "compare-form")
    assert compare["method"] == "get" and compare["action"] == "/compare"


def test_the_api_says_which_controls_each_job_allows(operator_client):
    running, stopped = b.job(status="running"), b.job(status="stopped")
    jobs = {j["id"]: j for j in operator_client.get("/api/jobs").json()["jobs"]}
    assert (jobs[running.pk]["can_stop"], jobs[running.pk]["can_resume"]) == (True, False)
    assert (jobs[stopped.pk]["can_stop"], jobs[stopped.pk]["can_resume"]) == (False, True)


def test_stop_asks_the_job_to_stop_and_records_who(operator_client, operator):
    job = b.job(status="running")
    resp = operator_client.post(f"/jobs/{job.pk}/stop", {"next": "/jobs"})
    assert resp.status_code == 302 and resp["Location"] == "/jobs"
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


def test_a_status_filter_that_is_not_a_status_is_a_400_naming_the_accepted_ones(viewer_client):
    b.job(status="running")
    resp = viewer_client.get("/jobs?status=garbage")
    assert resp.status_code == 400
    assert resp.context["field"] == "status"
    assert resp.context["message"] == ("status must be one of queued, running, stopping, stopped, completed, failed, "
                                       "budget_exhausted, or empty for all jobs; got 'garbage'")
    assert viewer_client.get("/jobs?status=running").context["filters"] == {"status": "running"}

"""The external kind of run (tracking/kind.py): what it refuses, and how trainer finds it by source."""

import pytest

from tracking.kind import EXTERNAL, open_job
from trainer.kinds import kind_of, kinds
from trainer.kinds.embedded import EMBEDDED
from trainer.models import Job


def test_each_source_has_the_kind_its_app_registered(db):
    assert {k.source for k in kinds()} == {"embedded", "external", "launched"}
    assert kind_of(open_job(name="trl", team="rl")) is EXTERNAL
    assert kind_of(Job(source="embedded")) is EMBEDDED


def test_a_source_no_app_registered_is_refused_naming_the_registered_ones():
    with pytest.raises(LookupError, match=r"no kind of run is registered for source 'queued-elsewhere' .*embedded, "
                                          r"external, launched"):
        kind_of(Job(pk=7, source="queued-elsewhere"))


@pytest.mark.parametrize("ended", ["stopped", "failed", "completed"])
def test_an_ended_external_run_cannot_be_resumed_or_continued_from_yardstick(db, ended):
    job = open_job(name="trl", team="rl")
    Job.objects.filter(pk=job.pk).update(status=ended)
    job.refresh_from_db()
    assert (job.can_resume, job.can_continue, job.resume()) == (False, False, False)
    assert job.resume_refusal() == (f"job {job.pk} is an external run: restart its training with MLFLOW_RUN_ID set "
                                    "to the run's id to continue it")
    assert job.continue_refusal() == f"job {job.pk} is an external run: its checkpoints are not Yardstick's to load"
    assert Job.objects.get(pk=job.pk).status == ended


def test_the_api_answers_a_resume_of_an_external_run_with_its_refusal(operator, client, db):
    job = open_job(name="trl", team="rl")
    Job.objects.filter(pk=job.pk).update(status="stopped")
    client.force_login(operator)
    resp = client.post(f"/api/jobs/{job.pk}/resume")
    assert resp.status_code == 409
    assert resp.json() == {"error": f"job {job.pk} is an external run: restart its training with MLFLOW_RUN_ID set "
                                    "to the run's id to continue it", "status": "stopped"}
    detail = client.get(f"/api/jobs/{job.pk}").json()
    assert (detail["source"], detail["can_resume"], detail["can_continue"]) == ("external", False, False)


def test_the_pages_ask_the_kind_for_the_badge_and_hand_binding(client, operator):
    run_job = open_job(name="trl", team="rl", framework="trl")
    assert run_job.badge == ("external · trl", "an outside training run reporting through the MLflow tracking API; "
                                               "its tags or params say trl")
    assert (run_job.kind.binds_by_hand, run_job.kind.holds_policy) == (True, False)
    assert Job(source="embedded").badge is None
    client.force_login(operator)
    page = client.get(f"/jobs/{run_job.pk}").content.decode()
    assert '<span class="badge ext" title="an outside training run' in page and ">external · trl</span>" in page
    assert "Bind this run to devices by hand" in page

"""GET /api/jobs/<id>, /steps and /samples: what a viewer reads about one job."""

import pytest

from trainer.models import Job, Sample, Step


@pytest.fixture
def job_with_steps(make_job):
    job = make_job()
    Step.objects.create(job=job, step=0, metrics={"eval/pass1": 12.5, "timing/eval_s": 0.1}, eval_pass1=12.5)
    for n in (1, 2, 3):
        Step.objects.create(job=job, step=n, metrics={"train/reward_mean": n / 10}, reward_mean=n / 10)
        Sample.objects.bulk_create([
            Sample(job=job, step=n, index=i, prompt=f"{n}+{i}=", completion=str(n + i), reward=1.0, advantage=0.5,
                   tool_calls=0)
            for i in range(2)
        ])
    Job.objects.filter(pk=job.pk).update(steps_done=3)
    return job


def test_a_viewer_reads_a_job_with_its_config_history_and_stints(viewer, client, job_with_steps):
    client.force_login(viewer)
    resp = client.get(f"/api/jobs/{job_with_steps.pk}")
    assert resp.status_code == 200
    body = resp.json()
    assert body["id"] == job_with_steps.pk and body["status"] == "queued" and body["steps_done"] == 3
    assert body["config"]["steps"] == 4
    assert [(c["from"], c["to"]) for c in body["status_changes"]] == [("", "queued")]
    assert body["stints"] == []


def test_an_unknown_job_is_a_404(viewer, client, db):
    client.force_login(viewer)
    resp = client.get("/api/jobs/999999")
    assert resp.status_code == 404
    assert resp.json() == {"error": "no job 999999"}


@pytest.mark.parametrize("path", ["", "/steps", "/samples"])
def test_reading_a_job_needs_a_role(outsider, client, job_with_steps, path):
    assert client.get(f"/api/jobs/{job_with_steps.pk}{path}").status_code == 401
    client.force_login(outsider)
    assert client.get(f"/api/jobs/{job_with_steps.pk}{path}").status_code == 403


def test_steps_start_from_the_baseline(viewer, client, job_with_steps):
    client.force_login(viewer)
    body = client.get(f"/api/jobs/{job_with_steps.pk}/steps").json()
    assert [s["step"] for s in body["steps"]] == [0, 1, 2, 3]
    assert body["steps"][0]["metrics"]["eval/pass1"] == 12.5
    assert body["next_after"] == 3


def test_steps_carry_the_controls_the_job_offers_for_a_page_catching_up(viewer, client, job_with_steps):
    client.force_login(viewer)
    body = client.get(f"/api/jobs/{job_with_steps.pk}/steps").json()
    assert (body["status"], body["can_stop"], body["can_resume"]) == ("queued", True, False)
    Job.objects.filter(pk=job_with_steps.pk).update(status="failed", not_resumable_reason="cuda:9 is gone")
    body = client.get(f"/api/jobs/{job_with_steps.pk}/steps").json()
    assert (body["status"], body["can_stop"], body["can_resume"]) == ("failed", False, False)
    Job.objects.filter(pk=job_with_steps.pk).update(not_resumable_reason="")
    assert client.get(f"/api/jobs/{job_with_steps.pk}/steps").json()["can_resume"] is True


def test_steps_after_a_step_return_only_newer_ones(viewer, client, job_with_steps):
    client.force_login(viewer)
    body = client.get(f"/api/jobs/{job_with_steps.pk}/steps?after=1").json()
    assert [s["step"] for s in body["steps"]] == [2, 3]
    assert body["steps"][1]["metrics"] == {"train/reward_mean": 0.3}
    assert client.get(f"/api/jobs/{job_with_steps.pk}/steps?after=3").json()["steps"] == []


@pytest.mark.parametrize("query, field", [("after=soon", "after"), ("after=-5", "after"), ("limit=0", "limit")])
def test_steps_reject_a_bad_query_naming_it(viewer, client, job_with_steps, query, field):
    client.force_login(viewer)
    resp = client.get(f"/api/jobs/{job_with_steps.pk}/steps?{query}")
    assert resp.status_code == 400
    assert resp.json()["field"] == field
    assert f"{field} must be an integer" in resp.json()["error"]


def test_samples_of_a_step(viewer, client, job_with_steps):
    client.force_login(viewer)
    body = client.get(f"/api/jobs/{job_with_steps.pk}/samples?step=2").json()
    assert body["step"] == 2
    assert body["samples"] == [
        {"step": 2, "index": 0, "prompt": "2+0=", "completion": "2", "reward": 1.0, "advantage": 0.5, "tool_calls": 0},
        {"step": 2, "index": 1, "prompt": "2+1=", "completion": "3", "reward": 1.0, "advantage": 0.5, "tool_calls": 0},
    ]


def test_samples_default_to_the_newest_step(viewer, client, job_with_steps):
    client.force_login(viewer)
    body = client.get(f"/api/jobs/{job_with_steps.pk}/samples").json()
    assert body["step"] == 3 and len(body["samples"]) == 2


def test_samples_reject_a_bad_step(viewer, client, job_with_steps):
    client.force_login(viewer)
    resp = client.get(f"/api/jobs/{job_with_steps.pk}/samples?step=x")
    assert resp.status_code == 400 and resp.json()["field"] == "step"

"""/api/campaigns: viewers read, operators create, add runs and start or stop loops; bad input names the field."""

import csv
import io
import json

import pytest
from django.test import Client

from campaigns.models import Campaign, Loop
from tests.trainer.helpers import TINY
from trainer import runner
from trainer.models import Job, Status

GOOD = {"name": "agentic", "team": "research", "envs": ["arithmetic", "toolcalc"], "run_config": {**TINY, "steps": 2},
        "eval_size": 8, "device": "cpu"}


@pytest.fixture
def as_role(request, db):
    def login(role):
        client = Client()
        if role != "anonymous":
            client.force_login(request.getfixturevalue({"admin": "admin_user"}.get(role, role)))
        return client

    return login


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.mark.parametrize("role, status", [("anonymous", 401), ("outsider", 403), ("viewer", 403), ("operator", 201),
                                          ("admin", 201)])
def test_creating_needs_the_operator_role(as_role, data_dir, role, status):
    resp = post(as_role(role), "/api/campaigns", GOOD)
    assert resp.status_code == status
    assert Campaign.objects.count() == (1 if status == 201 else 0)
    if status == 201:
        body = resp.json()
        assert (body["envs"], body["schedule"], body["loop"]) == (GOOD["envs"], GOOD["envs"], "off")


@pytest.mark.parametrize("role, status", [("anonymous", 401), ("outsider", 403), ("viewer", 200)])
def test_reading_needs_the_viewer_role(as_role, data_dir, operator, role, status):
    c = Campaign.create(**GOOD, created_by=operator)
    assert as_role(role).get("/api/campaigns").status_code == status
    resp = as_role(role).get(f"/api/campaigns/{c.pk}")
    assert resp.status_code == status
    if status == 200:
        assert resp.json()["figures"]["cost_usd"] == "0.00" and resp.json()["figures"]["runs"] == []


@pytest.mark.parametrize("change, field, says", [
    ({"envs": []}, "envs", "at least one"),
    ({"envs": ["chess"]}, "envs", "each one of arithmetic"),
    ({"schedule": ["arithmetic", "chess"]}, "schedule", "a list of the campaign's envs"),
    ({"run_config": {"steps": 0}}, "run_config.steps", "steps must be an integer from 1"),
    ({"run_config": {"env": "toolcalc"}}, "run_config.env", "comes from schedule"),
    ({"budget_usd": "-1"}, "budget_usd", "budget_usd must be a number of dollars >= 0"),
    ({"eval_size": 0}, "eval_size", "from 1 to 10000"),
    ({"start_from": 99999}, "start_from", "there is no job 99999"),
    ({"loop": "yes"}, "loop", "true or false"),
    ({"colour": "red"}, "colour", "unknown field 'colour'"),
])
def test_bad_input_is_a_400_naming_the_field(as_role, data_dir, change, field, says):
    resp = post(as_role("operator"), "/api/campaigns", {**GOOD, **change})
    assert resp.status_code == 400 and resp.json()["field"] == field and says in resp.json()["error"]
    assert Campaign.objects.count() == 0


def test_loop_start_and_stop_over_the_api(as_role, data_dir, operator):
    c = Campaign.create(**GOOD, created_by=operator)
    client = as_role("operator")
    assert as_role("viewer").post(f"/api/campaigns/{c.pk}/loop/start").status_code == 403
    resp = client.post(f"/api/campaigns/{c.pk}/loop/start")
    assert resp.status_code == 200 and resp.json()["loop"] == "running"
    run = Job.objects.get(pk=resp.json()["runs"][0])
    assert (run.env, run.status) == ("arithmetic", Status.QUEUED)
    again = client.post(f"/api/campaigns/{c.pk}/loop/start")
    assert again.status_code == 409 and "already running" in again.json()["error"]
    resp = client.post(f"/api/campaigns/{c.pk}/loop/stop")
    run.refresh_from_db()
    assert resp.json()["loop"] == Loop.STOPPED and run.status == Status.STOPPED
    assert client.post(f"/api/campaigns/{c.pk}/loop/stop").status_code == 409


def test_a_spent_budget_refuses_the_loop(as_role, data_dir, operator):
    c = Campaign.create(**GOOD, budget_usd="0", created_by=operator)
    resp = as_role("operator").post(f"/api/campaigns/{c.pk}/loop/start")
    assert resp.status_code == 409 and "raise the budget" in resp.json()["error"]
    assert not Job.objects.exists()


def test_adding_a_run_and_the_csv(as_role, data_dir, operator, make_job):
    c = Campaign.create(**{**GOOD, "name": "=HYPERLINK(1)"}, created_by=operator)
    job = runner.run(make_job(steps=2).pk)
    client = as_role("operator")
    assert post(client, f"/api/campaigns/{c.pk}/runs", {"job": "x"}).json()["field"] == "job"
    assert post(client, f"/api/campaigns/{c.pk}/runs", {"job": 99999}).status_code == 400
    assert post(client, f"/api/campaigns/{c.pk}/runs", {"job": job.pk}).status_code == 201
    other = Campaign.create(**GOOD, created_by=operator)
    refused = post(client, f"/api/campaigns/{other.pk}/runs", {"job": job.pk})
    assert refused.status_code == 400 and f"already a run of campaign {c.pk}" in refused.json()["error"]
    rows = list(csv.reader(io.StringIO(client.get(f"/api/campaigns/{c.pk}/csv").content.decode())))
    assert rows[0][:6] == ["run", "job_id", "name", "env", "status", "cost_usd"]
    assert rows[1][1] == str(job.pk) and rows[-1][0] == "TOTAL" and rows[-1][2] == "'=HYPERLINK(1)"

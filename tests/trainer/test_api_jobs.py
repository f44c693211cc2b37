"""GET/POST /api/jobs: viewers list jobs, operators start them, bad input is a 400 naming the field."""

import json
from decimal import Decimal

import pytest
from django.test import Client

from tests.trainer.helpers import TINY
from trainer.models import Job, StatusChange

GOOD = {"name": "arith-1", "team": "research", "env": "arithmetic", "config": {**TINY, "steps": 3},
        "budget_usd": "12.50", "device": "cpu"}


def post(client, body, **headers):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post("/api/jobs", data, content_type="application/json", **headers)


@pytest.fixture
def as_role(request, db):
    def login(role):
        client = Client()
        if role != "anonymous":
            client.force_login(request.getfixturevalue({"admin": "admin_user"}.get(role, role)))
        return client

    return login


@pytest.mark.parametrize("role, status", [
    ("anonymous", 401), ("outsider", 403), ("viewer", 200), ("operator", 200), ("admin", 200),
])
def test_listing_needs_the_viewer_role(as_role, role, status, make_job):
    make_job()
    resp = as_role(role).get("/api/jobs")
    assert resp.status_code == status
    if status == 200:
        assert [j["name"] for j in resp.json()["jobs"]] == ["tiny"]


@pytest.mark.parametrize("role, status", [
    ("anonymous", 401), ("outsider", 403), ("viewer", 403), ("operator", 201), ("admin", 201),
])
def test_starting_a_job_needs_the_operator_role(as_role, role, status, data_dir):
    resp = post(as_role(role), GOOD)
    assert resp.status_code == status
    assert Job.objects.count() == (1 if status == 201 else 0)
    if status == 403:
        assert resp.json() == {"error": "this needs the operator role"}


def test_it_creates_a_queued_job_with_the_full_config(operator, client, data_dir):
    client.force_login(operator)
    resp = post(client, GOOD)
    assert resp.status_code == 201
    job = Job.objects.get()
    assert resp.json()["id"] == job.pk
    assert (job.name, job.team, job.env, job.device, job.status) == ("arith-1", "research", "arithmetic", "cpu", "queued")
    assert job.budget_usd == Decimal("12.50")
    assert job.created_by == operator
    # Defaults are frozen into the row, so a later change of a default never alters this job.
    assert job.config["steps"] == 3 and job.config["env"] == "arithmetic" and "lr" in job.config
    assert list(StatusChange.objects.values_list("from_status", "to_status")) == [("", "queued")]


def test_it_lists_progress_reward_and_pass1(viewer, client, make_job):
    job = make_job()
    Job.objects.filter(pk=job.pk).update(steps_done=1, latest_reward_mean=0.25, baseline_pass1=10.0, latest_pass1=20.0)
    client.force_login(viewer)
    row = client.get("/api/jobs").json()["jobs"][0]
    assert row["status"] == "queued"
    assert row["progress"] == 0.25 and row["steps_done"] == 1 and row["steps"] == 4
    assert (row["latest_reward_mean"], row["baseline_pass1"], row["latest_pass1"]) == (0.25, 10.0, 20.0)


def test_it_filters_by_status(viewer, client, make_job):
    make_job()
    stopped = make_job()
    stopped.request_stop()
    client.force_login(viewer)
    assert [j["id"] for j in client.get("/api/jobs?status=stopped").json()["jobs"]] == [stopped.pk]


def test_a_status_filter_that_is_not_a_status_is_a_400_not_an_empty_list(viewer, client, make_job):
    make_job()
    client.force_login(viewer)
    resp = client.get("/api/jobs?status=garbage")
    assert resp.status_code == 400
    assert resp.json() == {"field": "status", "error": "status must be one of queued, running, stopping, stopped, "
                                                       "completed, failed, budget_exhausted, or empty for all jobs; "
                                                       "got 'garbage'"}


@pytest.mark.parametrize("change, field, says", [
    ({"env": "chess"}, "env", "env must be one of arithmetic, toolcalc, got 'chess'"),
    ({"config": {"steps": 0}}, "config.steps", "steps must be an integer from 1 to 100000, got 0"),
    ({"config": {"group_size": 1}}, "config.group_size", "group_size must be an integer from 2 to 256, got 1"),
    ({"config": {"stepz": 3}}, "config.stepz", "unknown field 'stepz'; accepted fields are env, steps"),
    ({"config": {"lr": "fast"}}, "config.lr", "lr must be a number > 0 and <= 1, got 'fast'"),
    ({"config": [1, 2]}, "config", "config must be an object"),
    ({"budget_usd": -3}, "budget_usd", "budget_usd must be a number of dollars >= 0 with at most 6 decimal places, or null for no budget, got -3"),
    ({"budget_usd": "lots"}, "budget_usd", "got 'lots'"),
    ({"name": None}, "name", "name is required"),
    ({"name": "   "}, "name", "name is required"),
    ({"team": None}, "team", "team is required"),
    ({"env": None}, "env", "env is required: one of arithmetic, toolcalc"),
    ({"device": "tpu"}, "device", "device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    ({"prio": 1}, "prio", "unknown field 'prio'; accepted fields are name, team, env"),
    ({"priority": "urgent"}, "priority", "priority must be one of low, normal, high; got 'urgent'"),
    ({"priority": "high"}, "priority", "priority high is for admins; choose low or normal"),
    # Only an exact accepted value: "$" in the old pattern let a trailing newline through.
    ({"device": "cuda:1\n"}, "device", "device must be auto, cpu, cuda or cuda:N, got 'cuda:1\\n'"),
    # Text PostgreSQL cannot store (NUL) or UTF-8 cannot encode (a lone surrogate) was a 500.
    ({"name": "a\u0000b"}, "name", "name contains a NUL (U+0000) character; it must be text without NUL"),
    ({"team": "a\u0000b"}, "team", "team contains a NUL (U+0000) character"),
    ({"name": "a\ud800b"}, "name", "name contains a lone surrogate (U+D800-U+DFFF) character"),
    ({"config": {"seed": 1, "lr_schedule": "a\u0000"}}, "config.lr_schedule", "contains a NUL"),
    # Bounds a real job could use and no more: these were accepted (steps >= 2^64 broke live updates).
    ({"config": {"steps": 99999999999}}, "config.steps", "steps must be an integer from 1 to 100000"),
    ({"config": {"top_k": 10**20}}, "config.top_k", "top_k must be an integer from 0 to 1024"),
    ({"config": {"eval_every": 10**12}}, "config.eval_every", "eval_every must be an integer from 1 to 100000"),
    ({"config": {"torch_threads": 1000000}}, "config.torch_threads", "torch_threads must be an integer from 0 to"),
])
def test_it_rejects_bad_input_naming_the_field(operator, client, data_dir, change, field, says):
    body = {**GOOD, **change}
    body = {k: v for k, v in body.items() if v is not None}
    client.force_login(operator)
    resp = post(client, body)
    assert resp.status_code == 400
    assert resp.json()["field"] == field
    assert says in resp.json()["error"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", ""])
def test_it_rejects_a_body_that_is_not_a_json_object(operator, client, raw):
    client.force_login(operator)
    resp = post(client, raw)
    assert resp.status_code == 400
    assert resp.json()["field"] == "body"
    assert "JSON object" in resp.json()["error"]
    assert Job.objects.count() == 0


def test_a_session_post_needs_the_csrf_token_but_a_bearer_token_does_not(operator, api_token, data_dir):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert post(client, GOOD).status_code == 403
    assert Job.objects.count() == 0

    scripted = Client(enforce_csrf_checks=True)
    resp = post(scripted, GOOD, HTTP_AUTHORIZATION=f"Bearer {api_token(operator)}")
    assert resp.status_code == 201
    assert Job.objects.get().created_by == operator


def test_other_methods_are_refused(operator, client):
    client.force_login(operator)
    resp = client.delete("/api/jobs")
    assert resp.status_code == 405
    assert resp["Allow"] == "GET, POST"


@pytest.mark.parametrize("raw", ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000])
def test_it_refuses_json_nested_too_deep_as_a_400_not_a_recursion_error(operator, client, raw):
    client.force_login(operator)
    resp = post(client, raw)
    assert resp.status_code == 400
    assert resp.json() == {"field": "body", "error": "the body must be a JSON object nested at most 32 levels deep"}
    assert Job.objects.count() == 0


@pytest.mark.parametrize("query, field", [("status=%00", "status"), ("team=%00", "team"), ("team=a%00b", "team")])
def test_a_nul_in_a_query_parameter_is_a_400_naming_it(viewer, client, query, field):
    client.force_login(viewer)
    resp = client.get(f"/api/jobs?{query}")
    assert resp.status_code == 400
    assert resp.json()["field"] == field
    assert resp.json()["error"].startswith(f"{field} contains a NUL (U+0000) character; it must be text without")

"""Registering serving deployments (serving/models.py, /api/serving, the Serving page): only admins register,
change or delete one; viewers and operators read; every bad field is refused naming it, and nothing is stored."""

import json

import pytest

from serving.models import Deployment

GOOD = {"name": "llama-8b", "team": "serve", "engine": "vllm", "metrics_url": "http://gpu-7:8000/metrics",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "node": "gpu-7", "description": "the chat model"}


def post(client, body, path="/api/serving"):
    return client.post(path, json.dumps(body), content_type="application/json")


@pytest.mark.parametrize("role, answer", [("viewer", 403), ("operator", 403)])
def test_only_an_admin_registers_or_deletes_and_anyone_with_a_role_reads(client, role, answer, request, admin_user):
    Deployment.register(GOOD, admin_user)
    client.force_login(request.getfixturevalue(role))
    assert client.get("/api/serving").json()["deployments"][0]["name"] == "llama-8b"
    assert client.get("/api/serving/llama-8b").json()["metrics_url"] == GOOD["metrics_url"]
    assert post(client, {**GOOD, "name": "other"}).status_code == answer
    assert client.delete("/api/serving/llama-8b").status_code == answer
    assert client.post("/serving/llama-8b/delete").status_code == answer
    assert client.post("/serving/register", {**GOOD, "name": "other"}).status_code == answer
    assert list(Deployment.objects.values_list("name", flat=True)) == ["llama-8b"]
    page = client.get("/serving").content.decode()
    assert 'data-deployment="llama-8b"' in page and 'id="register-form"' not in page


def test_an_admin_registers_changes_and_deletes_a_deployment(client, admin_user):
    client.force_login(admin_user)
    resp = post(client, {**GOOD, "engine": ""})
    assert resp.status_code == 201 and resp.json()["engine"] == "auto", "no engine: found from its page"
    resp = post(client, {**GOOD, "team": "serve-2"})
    assert resp.status_code == 200 and resp.json()["outcome"] == "updated"
    row = Deployment.objects.get()
    assert (row.team, row.engine, row.model, row.created_by) == ("serve-2", "vllm", GOOD["model"], admin_user)
    assert client.get("/api/serving/nope").status_code == 404
    assert client.delete("/api/serving/llama-8b").json() == {"deleted": "llama-8b"}
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("field, value, says", [
    ("metrics_url", "ftp://gpu-7/metrics", "must be an http(s) URL"),
    ("metrics_url", "gpu-7:8000/metrics", "must be an http(s) URL"),
    ("metrics_url", "http://gpu-7:70000/metrics", "port"),
    ("metrics_url", "http://user:pw@gpu-7:8000/metrics", "must not hold a user or password"),
    ("metrics_url", "", "metrics_url is required"),
    ("model", "m" * 10_000, "model must be at most 500 characters, got 10,000"),
    ("engine", "ollama", "engine must be one of auto, vllm (vLLM), sglang (SGLang)"),
    ("engine", 3, "engine must be one of"),
    ("name", "Big Model", "name must be 1 to 100 lower-case letters"),
    ("name", "x" * 101, "name must be 1 to 100"),
    ("team", "", "team is required"),
    ("team", "a\x00b", "team contains a NUL"),
    ("node", "gpu 7", "node must be a node's name"),
    ("colour", "red", "a deployment has no field 'colour'"),
])
def test_a_bad_field_is_refused_naming_it_and_nothing_is_stored(client, admin_user, field, value, says):
    client.force_login(admin_user)
    Deployment.register(GOOD, admin_user)
    before = Deployment.objects.get()
    resp = post(client, {**GOOD, "team": "changed", field: value})
    assert resp.status_code == 400 and resp.json()["field"] == field and says in resp.json()["error"], resp.json()
    after = Deployment.objects.get()
    assert (after.team, after.updated_at) == (before.team, before.updated_at), "the stored deployment is untouched"


def test_the_pages_form_registers_and_a_refused_one_comes_back_as_typed(client, admin_user):
    client.force_login(admin_user)
    page = client.get("/serving").content.decode()
    assert 'id="deployments-empty"' in page and 'id="register-form"' in page
    resp = client.post("/serving/register", {**GOOD, "metrics_url": "gpu-7:8000"}, follow=True)
    text = resp.content.decode()
    assert "Deployment not registered: metrics_url must be an http(s) URL" in text
    assert '<details class="card start" id="register" open>' in text and 'value="gpu-7:8000"' in text
    assert 'value="meta-llama/Llama-3.1-8B-Instruct"' in text and not Deployment.objects.exists()
    resp = client.post("/serving/register", GOOD, follow=True)
    assert "Deployment llama-8b created." in resp.content.decode()
    assert 'data-deployment="llama-8b"' in resp.content.decode()
    resp = client.post("/serving/llama-8b/delete", follow=True)
    assert "Deployment llama-8b deleted." in resp.content.decode() and not Deployment.objects.exists()

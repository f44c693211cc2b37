"""`manage.py create_token USER` issues a bearer token that logs a script in."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from yardstick.models import ApiToken


def test_it_prints_a_token_that_authenticates_its_user(viewer, client):
    out = StringIO()
    call_command("create_token", "vera", stdout=out)
    token = out.getvalue().strip()
    assert token.startswith("ys_")
    row = ApiToken.objects.get(user=viewer)
    assert row.key_hash != token, "only a hash of the token is stored"
    resp = client.get("/api/whoami", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert resp.status_code == 200
    assert resp.json() == {"username": "vera", "role": "viewer"}


def test_it_rejects_an_unknown_user_and_names_the_existing_ones(viewer):
    with pytest.raises(CommandError, match=r"no user named 'nobody'; existing users: vera \(--create ROLE makes one\)"):
        call_command("create_token", "nobody")
    assert ApiToken.objects.count() == 0


def test_a_revoked_token_is_refused(viewer, api_token, client):
    token = api_token(viewer)
    ApiToken.objects.update(revoked=True)
    resp = client.get("/api/whoami", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert resp.status_code == 401
    assert resp.json() == {"error": "invalid or revoked API token"}


def test_a_malformed_authorization_header_is_refused(client, db):
    resp = client.get("/api/whoami", HTTP_AUTHORIZATION="Token abc")
    assert resp.status_code == 401
    assert "Bearer" in resp.json()["error"]


def test_it_creates_a_reporter_for_a_training_machine_whose_token_writes_runs_only(db, client):
    out = StringIO()
    call_command("create_token", "trainer-bot", "--create", "reporter", stdout=out)
    token = out.getvalue().strip()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    created = client.post("/api/2.0/mlflow/experiments/create", {"name": "grpo"}, content_type="application/json",
                          **auth)
    assert created.status_code == 200 and created.json()["experiment_id"]
    assert client.get("/api/jobs", **auth).status_code == 403, "a reporter reads no other API"


def test_it_refuses_to_create_with_an_unknown_role_or_an_existing_name(viewer):
    from django.contrib.auth import get_user_model

    with pytest.raises(CommandError, match=r"--create takes a role: one of viewer, operator, admin, reporter; got 'root'"):
        call_command("create_token", "bot", "--create", "root")
    with pytest.raises(CommandError, match=r"a user named 'vera' already exists \(role: viewer\)"):
        call_command("create_token", "vera", "--create", "reporter")
    assert not get_user_model().objects.filter(username="bot").exists()
    assert ApiToken.objects.count() == 0

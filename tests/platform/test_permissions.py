"""Every page and API endpoint needs a logged-in user holding a role; /healthz and login do not."""

import pytest
from django.test import Client

ROLES = ["anonymous", "outsider", "viewer", "operator", "admin"]
RANK = {"outsider": 0, "viewer": 1, "operator": 2, "admin": 3}

# (method, path, role needed). Each kind of endpoint: a page, a read API, an admin page.
ENDPOINTS = [
    ("get", "/", "viewer"),
    ("get", "/api/whoami", "viewer"),
    ("get", "/admin/", "admin"),
]


@pytest.fixture
def as_role(request, db):
    def login(role):
        client = Client()
        if role != "anonymous":
            user = request.getfixturevalue({"admin": "admin_user"}.get(role, role))
            client.force_login(user)
        return client

    return login


@pytest.mark.parametrize("method, path, needed", ENDPOINTS)
@pytest.mark.parametrize("role", ROLES)
def test_each_endpoint_answers_each_role(as_role, role, method, path, needed):
    resp = getattr(as_role(role), method)(path)
    if role == "anonymous":
        if path.startswith("/api/"):
            assert resp.status_code == 401
            assert resp.json() == {"error": "authentication required"}
        else:
            assert resp.status_code == 302
            assert resp["Location"].startswith("/accounts/login/?next=")
    elif RANK[role] >= RANK[needed]:
        assert resp.status_code == 200
    elif path.startswith("/admin/"):
        # Django's admin sends a logged-in user without the role to its own login form.
        assert resp.status_code == 302
        assert resp["Location"].startswith("/admin/login/")
    else:
        assert resp.status_code == 403
        assert f"this needs the {needed} role" in resp.content.decode().lower()


@pytest.mark.parametrize("path", ["/healthz", "/accounts/login/"])
def test_health_and_login_are_open_to_anyone(client, path, db):
    resp = client.get(path)
    assert resp.status_code in (200, 503)  # /healthz is 503 while parts are down; never a redirect


def test_the_login_page_logs_a_user_in(client, viewer):
    page = client.get("/accounts/login/")
    assert b'name="csrfmiddlewaretoken"' in page.content
    resp = client.post("/accounts/login/", {"username": "vera", "password": "pw-vera"})
    assert resp.status_code == 302 and resp["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused_with_a_message(client, viewer):
    resp = client.post("/accounts/login/", {"username": "vera", "password": "nope"})
    assert resp.status_code == 200
    assert b"didn&#x27;t match" in resp.content or b"didn't match" in resp.content
    assert client.get("/").status_code == 302


def test_forms_need_a_csrf_token(viewer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer)
    resp = client.post("/accounts/logout/")
    assert resp.status_code == 403
    assert client.get("/").status_code == 200, "the session survives a forged logout"


def test_a_token_reaches_the_api_without_csrf_but_only_with_its_role(api_token, viewer, admin_user):
    client = Client(enforce_csrf_checks=True)
    assert client.get("/api/whoami", HTTP_AUTHORIZATION=f"Bearer {api_token(viewer)}").status_code == 200
    resp = client.get("/admin/", HTTP_AUTHORIZATION=f"Bearer {api_token(viewer)}")
    assert resp.status_code == 302
    resp = client.get("/admin/", HTTP_AUTHORIZATION=f"Bearer {api_token(admin_user)}")
    assert resp.status_code == 200

"""One URL style: a page's address has no trailing slash, and the same page asked for with one (`/recipes/`,
`/jobs/`) is sent there by a permanent redirect, its query string kept; the JSON APIs answer at their own
paths only."""

import re

import pytest
from django.urls import URLPattern, get_resolver

APPS = ("dashboard", "campaigns", "alerts", "launch", "collector", "trainer", "costs", "exporter")
# The list pages a person reaches from the menu (and types): each answers 200 at both addresses.
MENU = ["/", "/jobs", "/compare", "/costs", "/hardware", "/campaigns", "/alerts", "/recipes", "/clusters"]


def page_routes():
    """The routes of every app's pages (not its JSON API), as written in its urls.py."""
    routes = []
    for entry in get_resolver().url_patterns:
        module = getattr(entry, "urlconf_name", None)
        if getattr(module, "__name__", "").split(".")[0] not in APPS:
            continue
        routes += [str(p.pattern) for p in module.urlpatterns
                   if isinstance(p, URLPattern) and not str(p.pattern).startswith(("api/", "ajax-api/"))]
    return routes


def example_path(route):
    """`route` with a value for each converter: /jobs/<int:job_id> -> /jobs/1."""
    return "/" + re.sub(r"<(?:(\w+):)?\w+>", lambda m: "1" if m.group(1) == "int" else "x", route)


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def test_no_page_route_ends_in_a_slash():
    routes = page_routes()

    assert "jobs" in routes and "recipes" in routes and "campaigns" in routes and "alerts" in routes
    assert [r for r in routes if r.endswith("/")] == []


@pytest.mark.parametrize("path", MENU)
def test_each_menu_page_answers_at_its_address_and_with_a_trailing_slash(admin_client, path):
    assert admin_client.get(path).status_code == 200
    if path == "/":
        return

    resp = admin_client.get(path + "/", follow=True)

    assert resp.redirect_chain == [(path, 301)]
    assert resp.status_code == 200


def test_every_page_with_a_trailing_slash_is_sent_to_its_address(admin_client):
    for route in page_routes():
        if not route:
            continue
        path = example_path(route)
        resp = admin_client.get(path + "/")
        assert (resp.status_code, resp.get("Location")) == (301, path), route


def test_the_query_string_goes_along_and_a_form_is_sent_on_with_its_method(admin_client):
    resp = admin_client.get("/jobs/", {"status": "running", "what": "recipe:a b"})
    assert (resp.status_code, resp["Location"]) == (301, "/jobs?status=running&what=recipe%3Aa+b")

    posted = admin_client.post("/jobs/1/stop/", {"next": "/jobs"})
    assert (posted.status_code, posted["Location"]) == (308, "/jobs/1/stop")


def test_an_api_or_an_unknown_page_with_a_trailing_slash_is_not_found(admin_client):
    assert admin_client.get("/api/jobs/").status_code == 404
    assert admin_client.get("/api/jobs").status_code == 200
    assert admin_client.get("/no-such-page/").status_code == 404
    assert admin_client.get("/no-such-page").status_code == 404

"""/clusters in Chromium: an admin registers a Ray cluster through the form (a bad address first: named beside its
field, the typed values kept, nothing stored), sees it in the table with its header's name and never its value, opens
its page (nothing listens there: it says the cluster did not answer), then opens the Start form, picks a recipe that
runs on Ray and finds the Cluster select offering it."""

import pytest

from launch.models import Cluster, Recipe
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, shot, user_in_role

pytestmark = pytest.mark.browser

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers there
SECRET = "Bearer n0t-f0r-pages"


def test_an_admin_registers_a_cluster_and_the_start_form_offers_it_for_a_ray_recipe(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    ada = user_in_role(django_user_model, "ada", "admin")
    Recipe.define("on-ray", {"argv": ["{python}", "-c", "print('on ray')"], "executor": "ray",
                             "devices": {"kind": "cpu", "count": 1}}, ada)
    log_in(page, live_server.url, "ada", "/clusters")
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Clusters"
    assert page.inner_text("#clusters-table tbody").startswith("No clusters yet, and none is needed to start")

    page.fill("#f-name", "gpu-a")
    page.fill("#f-address", "ftp://ray-head")
    page.fill("#f-description", "the lab's Ray cluster")
    page.fill("#f-headers", f"Authorization: {SECRET}")
    page.click("#register-submit")
    assert page.inner_text("#e-address") == ("address must be the dashboard's http(s)://host:port (Ray's is port 8265), "
                                             "got 'ftp://ray-head'")
    assert page.get_attribute("#f-address", "aria-invalid") == "true"
    assert page.input_value("#f-name") == "gpu-a" and page.input_value("#f-address") == "ftp://ray-head"
    assert page.input_value("#f-description") == "the lab's Ray cluster"
    assert page.input_value("#f-headers") == "", "a header's value is never sent back"
    assert page.inner_text("#headers-again").startswith("Type the headers again (Authorization)")
    assert SECRET not in page.content()
    shot(page, output_dir, request, "bad-address")
    assert not Cluster.objects.exists()

    page.fill("#f-address", NOWHERE)
    page.fill("#f-headers", f"Authorization: {SECRET}")
    page.click("#register-submit")
    page.wait_for_url(live_server.url + "/clusters/gpu-a")
    assert page.inner_text(".messages") == "Cluster gpu-a registered."
    assert page.inner_text("#nodes-error").startswith("the cluster did not answer: ")
    assert page.inner_text("#cluster-headers").startswith("Authorization")
    assert SECRET not in page.content()
    shot(page, output_dir, request, "cluster")
    assert Cluster.objects.get().headers == {"Authorization": SECRET}

    page.click('a:text-is("All clusters")')
    page.wait_for_url(live_server.url + "/clusters")
    row = page.locator('#clusters-table tr[data-cluster="gpu-a"]')
    assert row.locator("th a").inner_text() == "gpu-a"
    assert row.locator(".cluster-headers").inner_text() == "Authorization"
    assert NOWHERE in row.inner_text() and SECRET not in page.content()
    shot(page, output_dir, request, "list")

    # The Start form: the recipe runs on Ray, so its fields hold a Cluster select offering the one registered.
    page.goto(live_server.url + "/jobs")
    page.click("details#start summary")
    assert not page.locator("#f-on-ray-cluster").is_visible()
    page.select_option("#f-what", "recipe:on-ray")
    select = page.locator("#f-on-ray-cluster")
    select.wait_for(state="visible")
    assert select.locator("option").all_inner_texts() == ["gpu-a"]
    assert select.input_value() == "gpu-a", "the only cluster of its kind, chosen"
    assert "on a Ray cluster" in page.inner_text('fieldset[data-what="recipe:on-ray"] legend')
    shot(page, output_dir, request, "start-form")

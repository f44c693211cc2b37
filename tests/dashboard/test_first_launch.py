"""The first launch: a fresh install's pages each say what to do next, with a link to where it is done, and the
example recipes are one admin's click away on the empty Recipes page (recipes run code on the nodes: operators and
viewers are told an admin does it, and refused the click)."""

import pytest
import yaml
from django.urls import reverse

from launch.models import EXAMPLES, Recipe, RecipeVersion
from tests.dashboard import builders as b

SHIPPED = [r["name"] for r in yaml.safe_load(EXAMPLES.read_text())["recipes"]]


def page(client, url):
    """The page's HTML with every run of white space one space, as a reader sees its text."""
    resp = client.get(url)
    assert resp.status_code == 200, url
    return " ".join(resp.content.decode().split())


def test_an_admin_imports_the_example_recipes_in_one_click_from_the_empty_recipes_page(client, admin_user):
    client.force_login(admin_user)
    empty = page(client, reverse("recipes"))
    assert "No recipes yet. Yardstick ships examples" in empty and "<code>trl-grpo-cpu</code> among them runs" in empty
    assert ('<input type="hidden" name="action" value="examples"><button type="submit" class="primary" id="import-examples">'
            'Import the example recipes</button>') in empty

    resp = client.post(reverse("recipes"), {"action": "examples"})
    assert resp.status_code == 302 and resp["Location"] == reverse("recipes")
    assert sorted(Recipe.objects.values_list("name", flat=True)) == sorted(SHIPPED)
    assert set(RecipeVersion.objects.values_list("version", "created_by__username")) == {(1, admin_user.username)}
    listed = page(client, reverse("recipes"))
    assert (f"Imported the example recipes: created {', '.join(SHIPPED)}. Edit their model roots, data paths and devices to "
            "your nodes; trl-grpo-cpu runs as it is, on this machine&#x27;s CPU.") in listed
    assert (f'<a href="{reverse("jobs")}?what=recipe:trl-grpo-cpu#start" >Jobs, Start a job</a>: <code>trl-grpo-cpu</code> '
            "runs on this machine's CPU as it is") in listed
    assert 'id="import-examples-again"' in listed and 'id="import-examples"' not in listed

    client.post(reverse("recipes"), {"action": "examples"})
    assert RecipeVersion.objects.count() == len(SHIPPED), "a second click changes nothing that is the same"
    assert f"Imported the example recipes: unchanged {', '.join(SHIPPED)}." in page(client, reverse("recipes"))


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_others_are_told_an_admin_imports_them_and_are_refused_the_click(client, operator, viewer, role):
    client.force_login({"operator": operator, "viewer": viewer}[role])
    empty = page(client, reverse("recipes"))
    assert "An admin can import them here in one click" in empty and 'value="examples"' not in empty
    assert client.post(reverse("recipes"), {"action": "examples"}).status_code == 403
    assert not Recipe.objects.exists()


def test_the_empty_jobs_page_says_how_to_start_one_and_where_the_recipes_come_from(client, operator, viewer):
    client.force_login(operator)
    html = page(client, reverse("jobs"))
    assert ('No jobs yet. Start one with <a href="#start">Start a job</a> above: the built-in trainer\'s <em>Smoke test</em> '
            "preset trains in seconds on this machine's CPU") in html
    assert f'imports the examples on <a href="{reverse("recipes")}">Recipes</a> in one click: <code>trl-grpo-cpu</code>' in html
    client.force_login(viewer)
    assert "No jobs yet. An operator or an admin starts them here" in page(client, reverse("jobs"))


def test_the_empty_clusters_page_says_none_is_needed_and_how_one_is_registered(client, admin_user, operator):
    client.force_login(admin_user)
    html = page(client, reverse("clusters"))
    assert "No clusters yet, and none is needed to start" in html
    assert ('<a href="#register-cluster">register it below</a>: a Ray cluster by its head\'s dashboard address '
            "(<code>http://&lt;head&gt;:8265</code>), a Slurm cluster by the path of the <code>slurm.conf</code>") in html
    client.force_login(operator)
    assert "an admin registers it here: a Ray cluster" in page(client, reverse("clusters"))


def test_the_empty_campaigns_page_says_how_one_is_made(client, operator):
    client.force_login(operator)
    html = page(client, reverse("campaigns"))
    assert 'No campaign yet. Make one with <a href="#new-campaign">New campaign</a> above' in html
    assert f'an admin imports the examples on <a href="{reverse("recipes")}">Recipes</a>' in html


def test_the_alerts_page_says_no_channel_carries_its_alerts_yet(client, admin_user, operator):
    client.force_login(admin_user)
    html = page(client, reverse("alerts"))
    assert "No alert yet: each rule below fires one when its condition holds." in html
    assert ('No channel is set, so alerts show only on this page: add a webhook, Slack or email channel under '
            '<a href="#new-channel">New channel</a>, then pick it on a rule.') in html
    client.force_login(operator)
    assert "an admin adds a webhook, Slack or email channel." in page(client, reverse("alerts"))


def test_the_empty_costs_page_says_to_start_a_collector_then_a_job(client, viewer):
    client.force_login(viewer)
    html = page(client, reverse("costs"))
    assert "No telemetry yet: costs are computed from the devices' samples, and no collector has sent one." in html
    assert "<code>manage.py up --role jobs,collector</code>" in html and f'<a href="{reverse("fleet")}">Fleet</a>' in html

    b.device(b.node("gpu-a"), 0)
    html = page(client, reverse("costs"))
    assert "No telemetry yet" not in html
    assert f'a job\'s dollars show once one runs (<a href="{reverse("jobs")}">start one on Jobs</a>)' in html


def test_the_empty_hardware_page_says_to_start_a_run(client, viewer):
    client.force_login(viewer)
    assert (f'No runs charged in this period. A run shows here once its devices were charged to it: start one on '
            f'<a href="{reverse("jobs")}">Jobs</a>') in page(client, reverse("hardware"))

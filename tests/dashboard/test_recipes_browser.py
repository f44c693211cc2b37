"""/recipes in Chromium: an admin creates a recipe as YAML, edits it into a new version, sees its versions, is shown
the field a bad definition gets wrong (and nothing changes), exports and imports; an operator reads them with no
edit controls, and a POST forged with a valid CSRF token is refused with 403."""

import json

import pytest
import yaml

from launch.models import Recipe
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, shot, user_in_role

pytestmark = pytest.mark.browser

COUNTDOWN = """name: countdown
description: counts down from n
argv: ["{python}", "-c", "import sys; [print(i) for i in range(int(sys.argv[1]), 0, -1)]", "{n}"]
params:
  - name: n
    kind: integer
    default: 10
    minimum: 1
    maximum: 1000
    help: where to start
devices: {kind: cpu, count: 1}
"""


def editor(page):  # noqa: F811 - a page, not the fixture
    return page.locator("#f-definition")


def test_an_admin_creates_and_edits_a_recipe_and_a_bad_definition_changes_nothing(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    user_in_role(django_user_model, "ada", "admin")
    log_in(page, live_server.url, "ada", "/recipes")
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Recipes"
    assert "No recipes yet. Yardstick ships examples" in page.inner_text("#recipes-table")
    assert editor(page).input_value() == "" and editor(page).get_attribute("placeholder").startswith("name: my-recipe\n")

    editor(page).fill(COUNTDOWN)
    page.click("#create-recipe")
    page.wait_for_url(live_server.url + "/recipes/countdown")
    assert page.inner_text(".messages") == "Recipe countdown created: version 1."
    assert page.locator("#versions-table tbody tr").count() == 1
    assert [page.locator("#recipe-argv li").nth(i).inner_text() for i in (0, 3)] == ["{python}", "{n}"]
    assert "where to start" in page.inner_text("#recipe-params")

    # The editor holds the current definition, as YAML; a change is version 2.
    text = editor(page).input_value()
    assert yaml.safe_load(text)["params"][0] == {"name": "n", "kind": "integer", "default": 10, "help": "where to start",
                                                 "minimum": 1, "maximum": 1000}
    editor(page).fill(text.replace("counts down from n", "counts down from n to 1"))
    page.click("#save-recipe")
    page.wait_for_url(live_server.url + "/recipes/countdown")
    assert page.inner_text(".messages") == "Recipe countdown is now version 2."
    versions = page.locator("#versions-table tbody tr")
    assert versions.count() == 2 and versions.first.get_attribute("data-version") == "2"
    assert "ada" in versions.first.inner_text()
    assert page.inner_text("#recipe-shown h2") == "Version 2 (current)"

    # A bad definition: the field it gets wrong, the text kept, nothing stored.
    bad = editor(page).input_value().replace("kind: integer", "kind: number")
    editor(page).fill(bad)
    page.click("#save-recipe")
    assert page.inner_text("#e-definition").startswith("Not saved: params.n.kind — params.n.kind must be one of integer,")
    assert editor(page).input_value() == bad and editor(page).get_attribute("aria-invalid") == "true"
    shot(page, output_dir, request, "bad")
    assert Recipe.objects.get(name="countdown").version == 2
    assert Recipe.objects.get(name="countdown").definition["params"][0]["kind"] == "integer"

    page.click('#versions-table a:text-is("1")')
    assert page.inner_text("#recipe-shown h2") == "Version 1 (an older one; the current is 2)"
    page.click("#recipe-shown summary")
    assert "description: counts down from n\n" in page.inner_text("#definition-text")
    shot(page, output_dir, request, "versions")

    # Export, then import a changed copy (as JSON, by the file's name): a new version.
    page.goto(live_server.url + "/recipes")
    href = page.locator("#recipes-export a", has_text="JSON").get_attribute("href")
    assert href == "/api/recipes/export?format=json"
    exported = page.request.get(live_server.url + href).json()
    assert [r["name"] for r in exported["recipes"]] == ["countdown"]
    exported["recipes"][0]["description"] = "imported"
    exported["recipes"].append({"name": "hello", "argv": ["echo", "hello"]})
    page.set_input_files("#f-import-file", files=[{"name": "recipes.json", "mimeType": "application/json",
                                                    "buffer": json.dumps(exported).encode()}])
    page.click("#import-submit")
    assert page.inner_text(".messages") == "Imported recipes.json: created hello; updated countdown."
    rows = page.locator("#recipes-table tbody tr")
    assert [rows.nth(i).get_attribute("data-recipe") for i in range(rows.count())] == ["countdown", "hello"]
    assert rows.first.locator("td.num").first.inner_text() == "3"
    shot(page, output_dir, request, "list")


def test_an_operator_reads_recipes_without_edit_controls_and_a_forged_post_is_refused(  # noqa: F811
        live_server, page, transactional_db, django_user_model, admin_user, output_dir, request):
    Recipe.define("countdown", yaml.safe_load(COUNTDOWN), admin_user)
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/recipes")
    assert page.locator("#recipes-table tbody tr").count() == 1
    assert page.locator("textarea, #new-recipe, #import-recipes, input[type=file]").count() == 0
    page.click('#recipes-table a:text-is("countdown")')
    page.wait_for_url(live_server.url + "/recipes/countdown")
    assert page.locator("textarea, #edit-recipe, form[method=post]").count() == 1, "only the Log out form posts"
    assert page.locator("#launch-it").get_attribute("href") == "/jobs?what=recipe:countdown#start"
    shot(page, output_dir, request, "detail")

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for url, form in (("/recipes/countdown", {"definition": COUNTDOWN.replace("counts down", "hacked"), "format": "yaml"}),
                      ("/recipes", {"definition": COUNTDOWN.replace("countdown", "mine"), "format": "yaml"}),
                      ("/recipes", {"action": "import"})):
        resp = page.request.post(live_server.url + url, form={**form, "csrfmiddlewaretoken": token},
                                 headers={"X-CSRFToken": token, "Referer": live_server.url + url})
        assert resp.status == 403 and "This needs the admin role" in resp.text(), (url, resp.status)
    assert list(Recipe.objects.values_list("name", "version")) == [("countdown", 1)]

    # The launch link opens the Start form with the recipe picked.
    page.click("#launch-it")
    page.wait_for_selector("#f-countdown-n:visible")
    assert page.locator("#f-what").input_value() == "recipe:countdown"
    assert page.locator("#f-countdown-n").input_value() == "10"
    assert page.locator("#f-countdown-env").input_value() == "", "its environment defaults to the recipe's name"

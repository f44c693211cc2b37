"""The Start form with the shipped example recipes, "Run again..." and "Continue..." of a launched job, and the Jobs
list's filters (in the URL, so a recipe's and a cluster's page link to their runs)."""

import re
from html import unescape

import pytest
import yaml

from launch import kind
from launch.models import Cluster, Launch, Recipe, import_all
from tests.conftest import ROOT
from tests.dashboard.test_launch_pages import GPUS, TYPED, ended, launched_job
from trainer.models import Job, Status, Worker

CONTINUING = {**TYPED, "description": "typed, from another job's checkpoint",
              "argv": ["{python}", "-c", "print('hi')", "--from={init_from}", "--steps={steps}", "{label}"],
              "params": [p for p in TYPED["params"] if p["name"] in ("steps", "label")]}


@pytest.fixture
def workers(db):
    """A live launch worker with two GPUs and a CPU (no process: what the pages and placement read of one)."""
    return Worker.report("launch@node-a", "node-a", ["launch@node-a"], ["cpu", "cuda:0", "cuda:1"], cores=16, gpus=GPUS)


@pytest.fixture
def recipes(admin_user):
    return Recipe.define("typed", TYPED, admin_user)[0], Recipe.define("typed-on", CONTINUING, admin_user)[0]


def field_value(html, field_id):
    """The value attribute of the input with id `field_id`, as the browser reads it."""
    tag = re.search(rf'<input\s[^>]*\bid="{re.escape(field_id)}"[^>]*>', html)
    assert tag, f"no input {field_id}"
    value = re.search(r'value="([^"]*)"', tag.group(0))
    return unescape(value.group(1)) if value else ""


def test_the_jobs_page_and_its_start_form_render_with_every_shipped_example_recipe(
        operator_client, admin_user, workers, django_capture_on_commit_callbacks):
    shipped = yaml.safe_load((ROOT / "launch" / "examples" / "recipes.yaml").read_text())
    import_all(shipped, admin_user)
    continuing = [r.name for r in Recipe.objects.all() if "{init_from}" in " ".join(r.definition["argv"])]
    assert continuing, "the examples hold a recipe that continues another job"
    resp = operator_client.get("/jobs")
    assert resp.status_code == 200
    html = resp.content.decode()
    for name in continuing:
        assert f'id="f-{name}-init_from" name="init_from" value=""' in html
        picked = operator_client.get(f"/jobs?what=recipe:{name}")
        assert picked.status_code == 200 and f'id="f-{name}-init_from"' in picked.content.decode()
    # A Continue without a job to continue is refused at its field, the form shown again: never a 500.
    with django_capture_on_commit_callbacks(execute=False):
        refused = operator_client.post("/jobs/start", {"what": f"recipe:{continuing[0]}", "team": "research",
                                                       "init_from": "999"})
    assert refused.status_code == 400
    page = refused.content.decode()
    assert ('<span class="field-error" id="e-%s-init_from">init_from must be the id of an ended job with a '
            'checkpoint; there is no job 999</span>' % continuing[0]) in page
    assert not Job.objects.exists()


def test_run_again_opens_the_start_form_filled_as_the_job_was_started_and_starts_the_edited_one(
        operator_client, operator, recipes, workers, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = kind.start(recipe="typed", params={"steps": 7, "size": "large", "loud": False, "data": "/data/it's here"},
                         name="walk trl", team="research", env="gsm8k-trl", budget_usd="3.5", created_by=operator,
                         stop_loss={"usd": "2", "points": "1"})
    job = ended(Job.objects.get(pk=job.pk), Status.FAILED, exit_code=1)
    for path in ("/jobs", f"/jobs/{job.pk}"):
        html = operator_client.get(path).content.decode()
        box = html[html.index(f'data-job-controls="{job.pk}"'):]
        assert f'href="/jobs?again={job.pk}#start"' in box[:2500], path
    resp = operator_client.get(f"/jobs?again={job.pk}")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert '<option value="recipe:typed" selected>' in html and 'id="start" open' in html
    assert (field_value(html, "f-name"), field_value(html, "f-team")) == ("walk trl", "research")
    assert field_value(html, "f-typed-env") == "gsm8k-trl" and field_value(html, "f-budget_usd") == "3.5"
    assert field_value(html, "f-typed-steps") == "7" and field_value(html, "f-typed-data") == "/data/it's here"
    assert '<option selected>large</option>' in html
    assert field_value(html, "f-stop_loss.usd") == "2" and field_value(html, "f-stop_loss.points") == "1"
    assert not re.search(r'id="f-typed-loud"[^>]*checked', html), "the boolean it ran with (off) is kept"
    assert Job.objects.count() == 1, "opening the form starts nothing"
    # The person edits one value and starts it: a new job with the edited value and the others kept.
    with django_capture_on_commit_callbacks(execute=False):
        started = operator_client.post("/jobs/start", {
            "what": "recipe:typed", "name": "walk trl", "team": "research", "env": "gsm8k-trl", "budget_usd": "3.5",
            "params.steps": "9", "params.lr": "0.0002", "params.size": "large", "params.loud": ["false"],
            "params.label": "run", "params.data": "/data/it's here"})
    new = Job.objects.exclude(pk=job.pk).get()
    assert started.status_code == 302 and started["Location"] == f"/jobs/{new.pk}"
    assert Launch.objects.get(pk=new.pk).values["steps"] == 9 and new.name == "walk trl"


def test_run_again_of_what_is_not_a_launched_job_or_lost_its_recipe_is_a_400_saying_so(
        operator_client, operator, recipes, workers, django_capture_on_commit_callbacks):
    from tests.dashboard import builders as b

    embedded = b.job(name="builtin")
    resp = operator_client.get(f"/jobs?again={embedded.pk}")
    assert resp.status_code == 400 and resp.context["field"] == "again"
    assert resp.context["message"] == f"again must be the id of a launched job, got '{embedded.pk}'"
    for odd in ("x", "²", "-1", str(2**63)):
        resp = operator_client.get(f"/jobs?again={odd}")
        assert resp.status_code == 400 and resp.context["message"] == (
            f"again must be an integer >= 1 and <= 2147483647, got {odd!r}"), odd
    with django_capture_on_commit_callbacks(execute=False):
        job = launched_job(operator)
    Recipe.objects.filter(name="typed").delete()
    resp = operator_client.get(f"/jobs?again={job.pk}")
    assert resp.status_code == 400
    assert resp.context["message"] == f"job {job.pk}'s recipe 'typed' is no longer defined, so it cannot run again"


def test_continue_offers_each_recipe_that_names_init_from_and_fills_the_job_and_shared_values(
        operator_client, operator, admin_user, recipes, workers, django_capture_on_commit_callbacks):
    Recipe.define("typed-score", {**CONTINUING, "description": "scores it", "evaluates": True}, admin_user)
    with django_capture_on_commit_callbacks(execute=False):
        job = launched_job(operator, steps=12, label="base")
    running = operator_client.get(f"/jobs/{job.pk}").content.decode()
    assert "↪ Continue…" not in running, "a job that has not ended has nothing to continue from"
    job = ended(job, Status.STOPPED, checkpoints=["checkpoint-12"], job_dir="/tmp/job", node="node-a")
    Job.objects.filter(pk=job.pk).update(checkpoint_step=12)
    html = operator_client.get(f"/jobs/{job.pk}").content.decode()
    box = html[html.index(f'data-job-controls="{job.pk}"'):]
    box = box[:box.index("</details>")]
    assert f'href="/jobs?continue={job.pk}&amp;what=recipe:typed-on#start"' in box
    assert "recipe:typed#" not in box, "typed names no {init_from}: it cannot continue a job"
    assert box.index("recipe:typed-on#") < box.index("recipe:typed-score#"), "training before scoring"
    assert ('title="an evaluation recipe: it scores the checkpoint"\n      >score with typed-score</a>') in box
    resp = operator_client.get(f"/jobs?continue={job.pk}&what=recipe:typed-on")
    assert resp.status_code == 200
    page = resp.content.decode()
    assert '<option value="recipe:typed-on" selected>' in page
    assert field_value(page, "f-typed-on-init_from") == str(job.pk)
    assert field_value(page, "f-typed-on-steps") == "12" and field_value(page, "f-typed-on-label") == "base"
    refused = operator_client.get(f"/jobs?continue={job.pk}&what=recipe:typed")
    assert refused.status_code == 400
    assert refused.context["message"] == (f"what must be recipe:<a recipe that continues job {job.pk}>, got 'typed'; "
                                          "those that can: typed-on, typed-score")


def test_the_jobs_list_filters_by_recipe_kind_team_user_and_cluster_in_its_url(
        viewer_client, operator, admin_user, recipes, workers, django_capture_on_commit_callbacks):
    from tests.dashboard import builders as b

    with django_capture_on_commit_callbacks(execute=False):
        typed = launched_job(operator)
    builtin = b.job(name="builtin", team="search")
    Cluster.objects.create(name="ray-a", kind="ray", address="http://127.0.0.1:1")
    Launch.objects.filter(pk=typed.pk).update(cluster=Cluster.objects.get(name="ray-a"))

    def shown(query):
        resp = viewer_client.get(f"/jobs?{query}")
        assert resp.status_code == 200, query
        return sorted(r["job"].pk for r in resp.context["rows"])

    assert shown("recipe=typed") == [typed.pk] and shown("kind=embedded") == [builtin.pk]
    assert shown("kind=launched&team=research") == [typed.pk] and shown("team=search") == [builtin.pk]
    assert shown(f"user={operator.username}") == [typed.pk] and shown("cluster=ray-a") == [typed.pk]
    assert shown("recipe=typed&team=search") == [] and shown("env=arithmetic") == [builtin.pk]
    html = viewer_client.get("/jobs?recipe=typed").content.decode()
    assert '<select name="recipe" id="filter-recipe">' in html and "<option selected>typed</option>" in html
    assert "No job matches these filters" in viewer_client.get("/jobs?recipe=nothing").content.decode()
    bad = viewer_client.get("/jobs?kind=robot")
    assert bad.status_code == 400 and bad.context["message"] == (
        "kind must be one of embedded, external, launched, or empty for every kind; got 'robot'")
    # The recipe's and the cluster's pages link to their runs there.
    assert 'href="/jobs?recipe=typed" id="recipe-all-runs"' in viewer_client.get("/recipes/typed").content.decode()
    assert 'href="/jobs?cluster=ray-a" id="cluster-all-runs"' in viewer_client.get("/clusters/ray-a").content.decode()


def test_the_jobs_list_reads_the_recipes_continue_offers_once_however_many_jobs_it_shows(
        operator_client, operator, recipes, workers, django_capture_on_commit_callbacks):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def ended_with_checkpoint():
        with django_capture_on_commit_callbacks(execute=False):
            job = ended(launched_job(operator), Status.STOPPED, checkpoints=["checkpoint-3"], node="node-a")
        Job.objects.filter(pk=job.pk).update(checkpoint_step=3)

    def recipe_reads():
        with CaptureQueriesContext(connection) as seen:
            html = operator_client.get("/jobs").content.decode()
        return html.count("↪ Continue…"), sum('FROM "launch_recipe"' in q["sql"] for q in seen.captured_queries)

    ended_with_checkpoint()
    offered, reads = recipe_reads()
    for _ in range(4):
        ended_with_checkpoint()
    assert recipe_reads() == (5, reads) and offered == 1

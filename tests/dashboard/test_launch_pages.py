"""Launched jobs on the pages, without a browser: the Start form's recipes (typed inputs, every bad parameter named,
values kept, the launch placed), the workers' free and held GPUs beside it, a launched job's page (recipe, argv,
env names, devices, how it ended, the output panel), Restart, and /recipes (admins edit, others read; a POST from
them is a 403)."""

import io

import pytest
import yaml
from django.test import Client

from launch import kind
from launch.models import Launch, Recipe
from trainer.models import Job, Status, Worker

GPUS = [{"index": i, "uuid": f"GPU-a{i}", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559} for i in (0, 1)]
TYPED = {
    "description": "every kind of parameter",
    "argv": ["{python}", "-c", "print('hi')", "--steps={steps}", "--lr", "{lr}", "--size={size}", "{loud}", "{label}",
             "{data}"],
    "params": [
        {"name": "steps", "kind": "integer", "default": 50, "minimum": 1, "maximum": 500, "help": "training steps"},
        {"name": "lr", "kind": "float", "default": 0.0002, "minimum": 0, "help": "learning rate"},
        {"name": "size", "kind": "choice", "choices": ["small", "large"], "default": "small", "help": "model size"},
        {"name": "loud", "kind": "boolean", "default": True, "help": "print more"},
        {"name": "label", "kind": "string", "default": "run", "pattern": "[a-z]+", "help": "a tag"},
        {"name": "data", "kind": "path", "root": "/data", "default": "gsm8k", "help": "the data set"},
    ],
    "devices": {"kind": "cuda", "count": 1},
    "framework": "trl",
}


@pytest.fixture
def launch_worker_row(db):
    """A live launch worker's report with two GPUs (no process: what the pages read of one)."""
    return Worker.report("launch@node-a", "node-a", ["launch@node-a"], ["cpu", "cuda:0", "cuda:1"], cores=16,
                         gpus=GPUS)


@pytest.fixture
def typed(admin_user):
    return Recipe.define("typed", TYPED, admin_user)[0]


def start_post(**fields):
    return {"what": "recipe:typed", "name": "", "team": "research", "env": "", "budget_usd": "", "node": "", "pool": "",
            "params.steps": "50", "params.lr": "0.0002", "params.size": "small", "params.loud": ["false", "true"],
            "params.label": "run", "params.data": "/data/gsm8k", **fields}


def test_the_start_form_draws_each_recipe_parameter_as_its_kind_of_input(operator_client, typed, launch_worker_row):
    html = operator_client.get("/jobs").content.decode()
    assert '<option value="recipe:typed">Recipe typed (version 1) · needs\n          1 × GPU · trl</option>' in html
    assert ('id="f-typed-steps" name="params.steps" type="number" value="50"\n    step="1" min="1"\n    max="500"') in html
    assert 'id="f-typed-lr" name="params.lr" type="number" value="0.0002"\n    step="any" min="0.0"' in html
    assert '<option selected>small</option><option>large</option>' in html
    assert 'name="params.loud" value="false"><span class="check"><input id="f-typed-loud" name="params.loud"\n    type="checkbox" ' \
           'value="true" checked' in html
    assert "a tag · text matching <code>[a-z]+</code>" in html and "the data set · a path under <code>/data</code>" in html
    assert "model size · one of small, large" in html and "print more · on or off" in html
    assert 'value="/data/gsm8k"' in html, "a path's default, under its root"
    assert "training steps · integer from 1 to 500\n    · default <code>50</code>" in html
    # Only the picked one's fields post: the recipe's are disabled until it is picked.
    assert '<fieldset class="what-fields recipe-fields" data-what="recipe:typed" disabled hidden>' in html
    picked = operator_client.get("/jobs?what=recipe:typed").content.decode()
    assert '<fieldset class="what-fields recipe-fields" data-what="recipe:typed">' in picked
    assert '<fieldset class="what-fields" data-what="builtin" disabled hidden>' in picked
    assert '<input id="f-typed-env" name="env" value=""' in picked, "the built-in preset's environment is not the recipe's"


def test_every_bad_parameter_is_named_beside_it_with_the_values_kept_and_nothing_started(
        operator_client, typed, launch_worker_row):
    resp = operator_client.post("/jobs/start", start_post(**{"params.steps": "0", "params.label": "Bad Label",
                                                             "params.data": "../etc"}))
    assert resp.status_code == 400
    errors = resp.context["form_errors"]
    assert errors == {"params.steps": "params.steps must be from 1 to 500, got 0",
                      "params.label": "params.label must match [a-z]+, got 'Bad Label'",
                      "params.data": "params.data must be a path under /data (no ..), got '../etc'"}
    html = resp.content.decode()
    assert 'id="e-f-typed-steps">params.steps must be from 1 to 500, got 0</span>' in html
    assert 'value="0"' in html and 'value="Bad Label"' in html, "what was typed stays"
    assert '<a href="#f-typed-steps">' in html, "the list of what to fix links to the input"
    assert '<fieldset class="what-fields recipe-fields" data-what="recipe:typed">' in html, "the recipe stays picked"
    assert not Job.objects.exists()


def test_a_refusal_of_the_launch_itself_is_named_at_its_field(operator_client, typed, launch_worker_row):
    resp = operator_client.post("/jobs/start", start_post(node="node-z"))
    assert resp.status_code == 400
    assert resp.context["form_errors"]["node"].startswith("no launch worker has reported on node node-z")
    assert 'id="e-node"' in resp.content.decode()
    resp = operator_client.post("/jobs/start", start_post(what="recipe:gone"))
    assert resp.context["form_errors"] == {"recipe": "there is no recipe 'gone' (an admin may have renamed it)"}
    assert not Job.objects.exists()


def test_a_launch_from_the_form_is_placed_and_the_workers_show_the_gpu_it_holds(
        operator_client, operator, typed, launch_worker_row, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as sent:
        resp = operator_client.post("/jobs/start", start_post(**{"params.steps": "7", "params.loud": ["false"],
                                                                 "params.size": "large", "env": "gsm8k-trl",
                                                                 "budget_usd": "3.50"}))
    job = Job.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}"
    assert sent, "sent to the launch worker after commit"
    launch = Launch.objects.get(pk=job.pk)
    assert launch.values == {"steps": 7, "lr": 0.0002, "size": "large", "loud": False, "label": "run",
                             "data": "/data/gsm8k"}
    assert (job.name, job.env, float(job.budget_usd), job.created_by, launch.gpus) == ("typed", "gsm8k-trl", 3.5,
                                                                                     operator, [0])
    page = operator_client.get("/jobs").content.decode()
    row = page[page.index('<tr data-worker="launch@node-a">'):]
    row = row[:row.index("</tr>")]
    assert "GPU 1\n        of 2;" in row and f'GPU 0: <a href="/jobs/{job.pk}">job #{job.pk}</a>' in row


def launched_job(operator, recipe_name="typed", **values):
    job = kind.start(recipe=recipe_name, params=values, team="research", created_by=operator)
    return Job.objects.get(pk=job.pk)


def ended(job, status, **launch):
    assert job.claim()
    Launch.objects.filter(pk=job.pk).update(**launch)
    job.finish(status, "the command exited with status 1" if status == Status.FAILED else "stopped",
               error="exited with status 1" if status == Status.FAILED else "")
    return Job.objects.get(pk=job.pk)


def test_a_launched_jobs_page_shows_its_recipe_argv_env_names_devices_and_how_it_ended(
        operator_client, operator, typed, launch_worker_row, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = launched_job(operator, label="spaces", data="two words")
    argv = ["/usr/bin/python3", "-c", "print('hi')", "--steps=50", "--lr", "0.0002", "--size=small", "true", "spaces",
            "/data/two words"]
    job = ended(job, Status.STOPPED, argv=argv, env_names=["CUDA_VISIBLE_DEVICES", "MLFLOW_RUN_ID"],
                stop_step="SIGTERM", exit_code=-15, output_seq=12, output_dropped=2, node="node-a")
    resp = operator_client.get(f"/jobs/{job.pk}")
    html = resp.content.decode()
    card = html[html.index('id="launch-card"'):html.index("</section>", html.index('id="launch-card"'))]
    assert '<a href="/recipes/typed?version=1"\n      >typed</a> version 1 · trl' in card
    assert "".join(f"<li><code>{a}</code></li>\n  " for a in argv).replace("'", "&#x27;") in card
    assert '<ol class="argv" id="launch-argv" start="0">' in card
    assert "<li><code>CUDA_VISIBLE_DEVICES</code></li><li><code>MLFLOW_RUN_ID</code></li>" in card
    assert "GPU 0 <span class=\"hint\">(NVML index)</span> on worker <code>launch@node-a</code>, node node-a" in card
    assert "<code>SIGTERM</code> — SIGTERM, after the stop flag&#x27;s grace" in card
    assert "<code>killed by SIGTERM (signal 15)</code>" in card
    assert "<code>data</code> = <code class=\"value\">/data/two words</code>" in card
    out = html[html.index('id="output"'):]
    assert 'data-last="12" data-dropped="2"' in out and "10 lines kept" in out
    assert "… 2 earlier lines dropped: the log keeps the newest 10 MiB" in out
    assert f'href="/api/jobs/{job.pk}/output.txt" download' in out
    assert "yardstick/output.js" in html
    # The same card, as a live page fetches it when the status changes.
    part = operator_client.get(f"/jobs/{job.pk}/part/launch").content.decode()
    assert part.strip().startswith('<section class="card launch-card" id="launch-card"') and "killed by SIGTERM" in part


def test_a_job_of_another_kind_has_no_output_panel(viewer_client):
    from tests.dashboard import builders as b

    job = b.job(name="embedded")
    html = viewer_client.get(f"/jobs/{job.pk}").content.decode()
    assert 'id="output"' not in html and 'id="launch-card"' not in html and "output.js" not in html
    assert viewer_client.get(f"/jobs/{job.pk}/part/launch").status_code == 404
    assert viewer_client.get(f"/jobs/{job.pk}/part/nothing").status_code == 404


def test_restart_is_offered_beside_why_in_the_list_and_on_the_page_and_starts_a_new_job(
        operator_client, viewer, operator, typed, launch_worker_row, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = ended(launched_job(operator, steps=9), Status.FAILED, exit_code=1)
    why = (f"cannot be resumed: job {job.pk}&#x27;s recipe typed gives no resume arguments: Restart starts it again from "
           "the beginning")
    for path in ("/jobs", f"/jobs/{job.pk}"):
        html = operator_client.get(path).content.decode()
        box = html[html.index(f'data-job-controls="{job.pk}"'):]
        box = box[:box.index("job-restart-why") + 300]
        assert f'action="/jobs/{job.pk}/restart"' in box and "↻ Restart" in box, path
        assert why in html, path
        assert f'data-part="/jobs/{job.pk}/part/controls?next={path}"' in box, path
    with django_capture_on_commit_callbacks(execute=False) as sent:
        resp = operator_client.post(f"/jobs/{job.pk}/restart", {"next": "/jobs"})
    new = Job.objects.exclude(pk=job.pk).get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{new.pk}" and sent
    assert Launch.objects.get(pk=new.pk).values == Launch.objects.get(pk=job.pk).values
    assert new.status == "queued" and new.name == job.name and new.team == "research"
    said = operator_client.get(resp["Location"]).content.decode()
    assert f"Job {new.pk} &#x27;{new.name}&#x27; queued: it restarts job {job.pk}&#x27;s recipe typed from the beginning." in said
    viewer_client = Client()
    viewer_client.force_login(viewer)
    assert viewer_client.post(f"/jobs/{job.pk}/restart").status_code == 403


def test_no_restart_for_a_running_launched_job_nor_for_one_of_another_kind(
        operator_client, operator, typed, launch_worker_row, django_capture_on_commit_callbacks):
    from tests.dashboard import builders as b

    with django_capture_on_commit_callbacks(execute=False):
        running = launched_job(operator)
    assert running.claim()
    failed = b.job(name="embedded", status="failed")
    html = operator_client.get("/jobs").content.decode()
    assert f'action="/jobs/{running.pk}/restart"' not in html and f'action="/jobs/{failed.pk}/restart"' not in html
    resp = operator_client.post(f"/jobs/{failed.pk}/restart")
    assert resp.status_code == 404, "only a launched job restarts"


# -- /recipes --------------------------------------------------------------------------------------------

NEW = """name: count
description: counts
argv: ["{python}", "-c", "print({n})"]
params:
  - {name: n, kind: integer, default: 3, minimum: 1}
"""


def test_the_recipes_page_lists_them_and_a_non_admin_sees_no_edit_controls_and_is_refused_a_post(
        client, operator, viewer, typed):
    for user in (viewer, operator):
        client.force_login(user)
        html = client.get("/recipes").content.decode()
        row = html[html.index('<tr data-recipe="typed">'):]
        assert '<a href="/recipes/typed">typed</a>' in row and "1 × GPU" in row and "trl" in row
        assert 'href="/api/recipes/export?format=yaml"' in html and 'href="/api/recipes/export?format=json"' in html
        assert "<textarea" not in html and "Import" not in html.split("</section>")[1]
        detail = client.get("/recipes/typed").content.decode()
        assert "<textarea" not in detail and 'id="versions-table"' in detail
        assert client.post("/recipes", {"definition": NEW, "format": "yaml"}).status_code == 403
        assert client.post("/recipes/typed", {"definition": NEW, "format": "yaml"}).status_code == 403
        assert client.post("/recipes", {"action": "import"}).status_code == 403
    assert list(Recipe.objects.values_list("name", "version")) == [("typed", 1)]


def test_an_admin_creates_edits_and_imports_recipes_and_a_bad_definition_stores_nothing(client, admin_user):
    client.force_login(admin_user)
    resp = client.post("/recipes", {"definition": NEW, "format": "yaml"})
    assert resp.status_code == 302 and resp["Location"] == "/recipes/count"
    recipe = Recipe.objects.get(name="count")
    assert recipe.version == 1 and recipe.definition["params"][0]["minimum"] == 1

    bad = NEW.replace("kind: integer", "kind: number")
    resp = client.post("/recipes/count", {"definition": bad, "format": "yaml"})
    assert resp.status_code == 400
    html = resp.content.decode()
    assert 'id="e-definition" role="alert">Not saved: <code>params.n.kind</code> — params.n.kind must be one of integer,' in html
    assert "kind: number" in html, "the text typed stays in the editor"
    assert Recipe.objects.get(name="count").version == 1

    resp = client.post("/recipes/count", {"definition": NEW.replace("counts", "counts to n"), "format": "yaml"})
    assert resp.status_code == 302
    assert Recipe.objects.get(name="count").version == 2
    detail = client.get("/recipes/count").content.decode()
    assert '<tr data-version="2" aria-current="true">' in detail and '<tr data-version="1">' in detail
    assert "Recipe count is now version 2." in detail
    old = client.get("/recipes/count?version=1").content.decode()
    assert "description: counts\n" in old and "(an older\n    one; the current is 2)" in old

    same = client.post("/recipes/count", {"definition": NEW.replace("counts", "counts to n"), "format": "yaml"})
    assert same.status_code == 302 and Recipe.objects.get(name="count").version == 2
    renamed = client.post("/recipes/count", {"definition": NEW.replace("name: count", "name: other"), "format": "yaml"})
    assert renamed.status_code == 400 and "<code>name</code> — name cannot change" in renamed.content.decode()
    not_yaml = client.post("/recipes", {"definition": "argv: [unclosed", "format": "yaml"})
    assert not_yaml.status_code == 400 and "<code>definition</code> — the definition is not YAML" in not_yaml.content.decode()
    twice = client.post("/recipes", {"definition": NEW, "format": "yaml"})
    assert twice.status_code == 400 and "a recipe &#x27;count&#x27; exists" in twice.content.decode()
    as_json = client.post("/recipes", {"definition": '{"name": "echo", "argv": ["echo", "hi"]}', "format": "json"})
    assert as_json.status_code == 302 and Recipe.objects.get(name="echo").version == 1

    exported = yaml.safe_load(b"".join([client.get("/api/recipes/export?format=yaml").content]))
    exported["recipes"][0]["description"] = "counts, imported"
    exported["recipes"].append({"name": "broken", "argv": "not a list"})
    upload = io.BytesIO(yaml.safe_dump(exported).encode())
    upload.name = "recipes.yaml"
    resp = client.post("/recipes", {"action": "import", "file": upload})
    assert resp.status_code == 400 and "Nothing imported: <code>recipes[2].argv</code>" in resp.content.decode()
    assert Recipe.objects.get(name="count").version == 2, "all or none"
    exported["recipes"].pop()
    upload = io.BytesIO(yaml.safe_dump(exported).encode())
    upload.name = "recipes.yml"
    resp = client.post("/recipes", {"action": "import", "file": upload}, follow=True)
    assert "Imported recipes.yml: updated count; unchanged echo." in resp.content.decode()
    assert Recipe.objects.get(name="count").version == 3


def test_a_launched_jobs_progress_counts_to_its_max_steps_parameter(viewer_client, admin_user, launch_worker_row):
    import re

    Recipe.define("trl", {"argv": ["{python}", "train.py", "--max_steps", "{max_steps}"], "devices": {"kind": "cpu", "count": 1},
                          "params": [{"name": "max_steps", "kind": "integer", "default": 100, "minimum": 1,
                                      "help": "optimizer steps in all"}]}, admin_user)
    job = kind.start(recipe="trl", params={"max_steps": 120}, team="research", created_by=admin_user)
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, steps_done=29)

    html = viewer_client.get(f"/jobs/{job.pk}").content.decode()

    assert Job.objects.get(pk=job.pk).steps_total == 120
    assert re.search(r'step <span id="steps-done">29</span><span id="steps-of">\s*of <span id="steps-total">120</span>', html)
    assert '<progress id="job-progress" max="120" value="29" aria-label="progress">' in html
    assert re.search(r'<div class="hint" id="steps-unknown" hidden>', html)

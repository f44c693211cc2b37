"""/api/recipes: admins define recipes (versioned) and move them as YAML or JSON; others read, or are refused."""

import json

import pytest
import yaml

from launch.models import Recipe, RecipeVersion

TRL = {
    "name": "trl-grpo",
    "description": "TRL's GRPO on a small model",
    "argv": ["trl", "grpo", "--model_name_or_path", "{model}", "--max_steps", "{steps}", "--output_dir", "{job_dir}",
             "--report_to", "mlflow"],
    "params": [{"name": "model", "kind": "path", "root": "/models", "default": "tiny", "help": "under /models"},
               {"name": "steps", "kind": "integer", "default": 100, "minimum": 1, "maximum": 100000}],
    "env": {"TOKENIZERS_PARALLELISM": "false"},
    "devices": {"kind": "cuda", "count": 1},
    "framework": "trl",
    "resume_argv": ["--resume_from_checkpoint", "{checkpoint}"],
}


def _post(client, url, body, content_type="application/json"):
    return client.post(url, body if isinstance(body, (str, bytes)) else json.dumps(body), content_type=content_type)


def _put(client, name, body):
    return client.put(f"/api/recipes/{name}", json.dumps(body), content_type="application/json")


def test_an_admin_defines_a_recipe_and_each_change_is_a_new_version(client, admin_user):
    client.force_login(admin_user)
    made = _post(client, "/api/recipes", TRL)
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["name"], body["version"], body["stop_grace_s"], body["workdir"]) == ("trl-grpo", 1, [60, 30], "")
    assert body["params"][1] == {"name": "steps", "kind": "integer", "default": 100, "help": "", "minimum": 1,
                                 "maximum": 100000}
    same = _put(client, "trl-grpo", {k: v for k, v in TRL.items() if k != "name"})
    assert same.json()["version"] == 1, "an unchanged definition is no new version"
    changed = _put(client, "trl-grpo", {**TRL, "stop_grace_s": [120, 10]})
    assert (changed.status_code, changed.json()["version"]) == (200, 2)
    assert [v["version"] for v in changed.json()["versions"]] == [2, 1]
    assert RecipeVersion.objects.get(recipe__name="trl-grpo", version=1).definition["stop_grace_s"] == [60, 30]
    assert RecipeVersion.objects.get(version=2).created_by == admin_user


@pytest.mark.parametrize("who", ["operator", "viewer"])
def test_only_admins_create_change_or_import_recipes(client, admin_user, operator, viewer, who):
    Recipe.define("trl-grpo", TRL)
    client.force_login({"operator": operator, "viewer": viewer}[who])
    assert client.get("/api/recipes").json()["recipes"][0]["name"] == "trl-grpo", "everyone reads them"
    assert _post(client, "/api/recipes", {**TRL, "name": "other"}).status_code == 403
    assert _put(client, "trl-grpo", {**TRL, "argv": ["sh", "-c", "id"]}).status_code == 403
    assert _post(client, "/api/recipes/import", {"recipes": [{**TRL, "argv": ["id"]}]}).status_code == 403
    recipe = Recipe.objects.get()
    assert (Recipe.objects.count(), recipe.version, recipe.definition["argv"][0]) == (1, 1, "trl")


@pytest.mark.parametrize("change, field, said", [
    ({"argv": "trl grpo --steps 3"}, "argv", "never a shell line"),
    ({"argv": ["trl", "--steps={stepz}"]}, "argv[1]", "names {stepz}, which is no parameter"),
    ({"argv": ["trl", "{checkpoint}"]}, "argv[1]", "names {checkpoint}"),
    ({"resume_argv": ["--from", "{checkpont}"]}, "resume_argv[1]", "no parameter"),
    ({"env": {"MLFLOW_TRACKING_URI": "http://elsewhere"}}, "env.MLFLOW_TRACKING_URI", "set by Yardstick"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env.CUDA_VISIBLE_DEVICES", "set by Yardstick"),
    ({"devices": {"kind": "tpu", "count": 1}}, "devices", "kind: cpu or cuda"),
    ({"stop_grace_s": [60]}, "stop_grace_s", "seconds after the stop flag"),
    ({"params": [{"name": "steps", "kind": "integer", "default": 0, "minimum": 1}]}, "params.steps.default", ">= 1"),
    ({"shell": True}, "shell", "a recipe has no field 'shell'"),
    ({"name": "Has Spaces"}, "name", "lower-case letters"),
    ({"argv": ["trl", "{models}/tiny"], "executor": "ray"}, "argv", "{models} is a node's own folder"),
])
def test_a_bad_definition_is_refused_naming_the_field_and_nothing_is_stored(client, admin_user, change, field, said):
    client.force_login(admin_user)
    refused = _post(client, "/api/recipes", {**TRL, **change})
    assert refused.status_code == 400
    assert refused.json()["field"] == field and said in refused.json()["error"]
    assert not Recipe.objects.exists() and not RecipeVersion.objects.exists()


def test_recipes_go_out_as_yaml_and_come_back_the_same_into_another_yardstick(client, admin_user):
    Recipe.define("trl-grpo", TRL)
    Recipe.define("plain", {"argv": ["python", "train.py", "--lr", "{lr}"],
                            "params": [{"name": "lr", "kind": "float", "default": 0.001}]})
    client.force_login(admin_user)
    exported = client.get("/api/recipes/export?format=yaml")
    assert exported["Content-Disposition"] == 'attachment; filename="yardstick-recipes.yaml"'
    document = yaml.safe_load(exported.content)
    assert [r["name"] for r in document["recipes"]] == ["plain", "trl-grpo"]
    before = {r.name: r.definition for r in Recipe.objects.all()}
    Recipe.objects.all().delete()
    imported = _post(client, "/api/recipes/import?format=yaml", exported.content, "application/yaml")
    assert imported.json() == {"created": ["plain", "trl-grpo"], "updated": [], "unchanged": []}
    assert {r.name: r.definition for r in Recipe.objects.all()} == before
    again = _post(client, "/api/recipes/import", json.loads(client.get("/api/recipes/export").content))
    assert again.json() == {"created": [], "updated": [], "unchanged": ["plain", "trl-grpo"]}


def test_an_import_with_one_bad_recipe_stores_none_of_them(client, admin_user):
    Recipe.define("trl-grpo", TRL)
    client.force_login(admin_user)
    document = {"recipes": [{**TRL, "stop_grace_s": [5, 5]}, {"name": "new", "argv": ["x", "{nope}"]}]}
    refused = _post(client, "/api/recipes/import", document)
    assert refused.status_code == 400 and refused.json()["field"] == "recipes[1].argv[1]"
    assert list(Recipe.objects.values_list("name", "version")) == [("trl-grpo", 1)]
    assert Recipe.objects.get().definition["stop_grace_s"] == [60, 30], "the first recipe's change was undone too"
    bad_yaml = _post(client, "/api/recipes/import?format=yaml", b"recipes: [unclosed", "application/yaml")
    assert bad_yaml.status_code == 400 and bad_yaml.json()["field"] == "body"
    assert client.get("/api/recipes/export?format=toml").json()["field"] == "format"


def test_the_recipe_docs_launching_md_shows_imports_as_it_says(client, admin_user):
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "launching.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    client.force_login(admin_user)
    imported = _post(client, "/api/recipes/import?format=yaml", example.encode(), "application/yaml")
    assert imported.json() == {"created": ["trl-grpo"], "updated": [], "unchanged": []}
    assert Recipe.objects.get().definition["resume_argv"] == ["--resume_from_checkpoint", "{checkpoint}"]


def test_an_env_value_or_workdir_naming_no_parameter_is_refused_by_its_name(client, admin_user):
    client.force_login(admin_user)
    for change, field in [({"env": {"DATA": "{dataset}"}}, "env.DATA"), ({"env": {"N": 3}}, "env.N"),
                          ({"workdir": "/work/{team}"}, "workdir")]:
        refused = _post(client, "/api/recipes", {**TRL, **change})
        assert (refused.status_code, refused.json()["field"]) == (400, field), refused.json()
    assert _post(client, "/api/recipes", {**TRL, "workdir": "{job_dir}/run"}).status_code == 201

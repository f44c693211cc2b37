"""/api/clusters and the fields of recipes that run on one: admins register clusters (header values kept secret),
a bad value is answered with what was wrong and stores nothing; a Ray recipe's fields are checked; a launch on a
cluster names the one it goes to, or is told which there are. No Ray is needed for any of it (tests/launch/test_ray.py
runs them on a real head)."""

import json

import pytest

from launch.models import Cluster, Launch, Recipe
from trainer.models import Status
from yardstick.inputs import InputError

RAY = {"name": "research", "address": "http://ray-head:8265", "python": "python3",
       "headers": {"Authorization": "Bearer s3cret-value", "X-Team": "rl"}, "description": "8 nodes"}


def _post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def test_an_admin_registers_a_cluster_whose_header_values_are_never_shown(client, admin_user, viewer):
    client.force_login(admin_user)
    made = _post(client, "/api/clusters", RAY)
    assert made.status_code == 201, made.content
    assert made.json()["header_names"] == ["Authorization", "X-Team"]
    assert Cluster.objects.get().headers["Authorization"] == "Bearer s3cret-value", "kept, to be sent"
    # (Nothing listens at port 9 here: the cluster's page asks it for its nodes and says it did not answer.)
    changed = _post(client, "/api/clusters", {**RAY, "address": "http://127.0.0.1:9/"})
    assert (changed.status_code, changed.json()["address"]) == (200, "http://127.0.0.1:9")
    client.force_login(viewer)
    for url in ("/api/clusters", "/api/clusters/research"):
        response = client.get(url)
        assert response.status_code == 200 and b"s3cret" not in response.content, url
    assert response.json()["nodes"] == [] and response.json()["nodes_error"].startswith("the cluster did not answer")
    assert _post(client, "/api/clusters", {**RAY, "name": "mine"}).status_code == 403
    assert client.delete("/api/clusters/research").status_code == 403
    assert Cluster.objects.count() == 1


@pytest.mark.parametrize("change, field, words", [
    ({"address": "ftp://ray-head:8265"}, "address", "http(s)://host:port"),
    ({"address": "http://user:pw@ray-head:8265"}, "address", "must not hold a user or password"),
    ({"address": "http://ray-head:port"}, "address", "not a URL"),
    ({"address": ""}, "address", "address is required"),
    ({"name": "Has Spaces"}, "name", "lower-case letters"),
    ({"kind": "kubernetes"}, "kind", "kind must be one of ray, slurm"),
    ({"kind": "slurm"}, "address", "absolute path of the slurm.conf"),
    ({"kind": "slurm", "address": "/etc/slurm/slurm.conf", "headers": {"X-Token": "t"}}, "headers",
     "headers are for a Ray dashboard"),
    ({"headers": ["Authorization"]}, "headers", "object of at most 20"),
    ({"headers": {"Bad Name": "x"}}, "headers", "letters, digits and '-'"),
    ({"headers": {"X-Token": "two\nlines"}}, "headers.X-Token", "one line"),
    ({"port": 8265}, "port", "its fields are name, kind, address, headers, python, description"),
])
def test_a_bad_cluster_is_refused_naming_the_field_and_stores_nothing(client, admin_user, change, field, words):
    client.force_login(admin_user)
    response = _post(client, "/api/clusters", {**RAY, **change})
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field and words in response.json()["error"], response.json()
    assert not Cluster.objects.exists()


@pytest.mark.parametrize("fields, field, words", [
    ({"executor": "k8s"}, "executor", "executor must be one of node, ray, slurm"),
    ({"cluster": "research"}, "cluster", "for a recipe that runs on a cluster"),
    ({"executor": "ray", "argv": ["python", "train.py", "--out", "{job_dir}"]}, "shared_dir",
     "on storage its nodes share: set shared_dir"),
    ({"executor": "ray", "resume_argv": ["--from", "{checkpoint}"]}, "shared_dir", "set shared_dir"),
    ({"executor": "ray", "shared_dir": "shared/runs"}, "shared_dir", "absolute path"),
    ({"executor": "ray", "cluster": "Not A Name"}, "cluster", "cluster must be 1 to 100"),
    ({"executor": "slurm"}, "shared_dir", "writes its output file into the job's output directory"),
    ({"executor": "slurm", "shared_dir": "/mnt/my runs"}, "shared_dir", "no spaces, quotes, '%'"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "working_dir": "/opt/r"}, "working_dir", "set workdir"),
    ({"executor": "ray", "slurm": {"partition": "gpu"}}, "slurm", "this recipe runs on ray"),
    ({"slurm": {"partition": "gpu"}}, "slurm", "for a recipe that runs on a cluster"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "slurm": ["gpu"]}, "slurm", "slurm must be an object"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "slurm": {"gpus": 8}}, "slurm.gpus", "slurm has no field"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "slurm": {"partition": "gpu;rm"}}, "slurm.partition",
     "must be a Slurm partition name"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "slurm": {"time_limit": "2 hours"}}, "slurm.time_limit",
     "a time limit as sbatch takes it"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "slurm": {"time_limit": "{hours}"}}, "slurm.time_limit",
     "names {hours}, which is no parameter"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "slurm": {"nodes": 0}}, "slurm.nodes", "from 1 to 1024"),
    ({"executor": "slurm", "shared_dir": "/mnt/runs", "slurm": {"gpus_as": "gpu"}}, "slurm.gpus_as",
     "gpus-per-node or gres"),
])
def test_the_fields_of_a_recipe_that_runs_on_a_cluster_are_checked(fields, field, words):
    with pytest.raises(InputError) as err:
        Recipe.define("r", {"argv": ["python", "train.py"], **fields})
    assert err.value.field == field and words in err.value.message, err.value.message


def test_a_slurm_recipe_keeps_its_batch_options_and_a_filled_one_slurm_would_not_take_fails_its_start(db):
    from launch.executor import LaunchError
    from launch.on_slurm import batch_script
    from launch.remote import Submission, render_options

    params = [{"name": "queue", "kind": "string", "default": "gpu"}]
    row, _ = Recipe.define("on-slurm", {"argv": ["{python}", "train.py"], "executor": "slurm", "params": params,
                                        "shared_dir": "/mnt/runs", "slurm": {"partition": "{queue}", "account": "rl",
                                                                            "time_limit": "1-00:00:00", "nodes": 2}})
    assert row.definition["slurm"] == {"partition": "{queue}", "account": "rl", "time_limit": "1-00:00:00",
                                       "nodes": 2, "gpus_as": "gpus-per-node"}

    def script(queue):
        return batch_script(Submission(
            id="yardstick-job-7-1", argv=["python", "train.py", "--note", "a b; $(id)"], env={"YARDSTICK_JOB_ID": "7"},
            cwd="", working_dir="", devices={"kind": "cuda", "count": 4}, stop_wait_s=30,
            metadata={"yardstick_job": "7"}, job_dir="/mnt/runs/job-7",
            options=render_options(row.definition["slurm"], {"queue": queue})))

    lines = script("gpu").splitlines()
    assert lines[1:5] == ["#SBATCH --job-name=yardstick-7", "#SBATCH --comment=yardstick-job-7-1",
                          "#SBATCH --output=/mnt/runs/job-7/slurm-%j.out", "#SBATCH --error=/mnt/runs/job-7/slurm-%j.out"]
    assert {"#SBATCH --partition=gpu", "#SBATCH --account=rl", "#SBATCH --time=1-00:00:00", "#SBATCH --nodes=2",
            "#SBATCH --gpus-per-node=4", "export YARDSTICK_JOB_ID=7"} <= set(lines)
    assert lines[-1] == "exec python train.py --note 'a b; $(id)'", "each argv item quoted whole"
    with pytest.raises(LaunchError, match=r"slurm.partition was filled as Slurm will not take it: .*got 'gpu -A x'"):
        script("gpu -A x")


def test_a_node_recipe_stays_as_it_was_stored_and_a_ray_recipe_keeps_its_fields(db):
    node, _ = Recipe.define("plain", {"argv": ["python", "train.py"]})
    assert "executor" not in node.definition, "definitions stored before clusters existed equal their exports"
    ray, _ = Recipe.define("on-ray", {"argv": ["{python}", "train.py", "{job_dir}"], "executor": "ray",
                                      "shared_dir": "/mnt/shared/runs", "working_dir": "/opt/recipes"})
    assert {k: ray.definition[k] for k in ("executor", "cluster", "shared_dir", "working_dir")} == {
        "executor": "ray", "cluster": "", "shared_dir": "/mnt/shared/runs", "working_dir": "/opt/recipes"}


@pytest.mark.django_db(transaction=True)
def test_a_launch_on_ray_goes_to_the_cluster_it_names_or_the_only_one_and_is_told_which_there_are(admin_user):
    from launch.kind import start

    Recipe.define("on-ray", {"argv": ["python", "train.py"], "executor": "ray"}, admin_user)
    with pytest.raises(InputError) as err:
        start(recipe="on-ray", team="rl", created_by=admin_user)
    assert err.value.field == "cluster" and "none yet (an admin registers one" in err.value.message
    research = Cluster.register(RAY, admin_user)[0]
    job = start(recipe="on-ray", team="rl", created_by=admin_user)
    assert (job.status, job.launch.executor, job.launch.cluster, job.placed_on) == (
        Status.QUEUED, "ray", research, "")
    Cluster.register({**RAY, "name": "second"}, admin_user)
    with pytest.raises(InputError) as err:
        start(recipe="on-ray", team="rl", created_by=admin_user)
    assert err.value.field == "cluster" and "choose one (research, second)" in err.value.message
    with pytest.raises(InputError) as err:
        start(recipe="on-ray", team="rl", created_by=admin_user, cluster="third")
    assert "there is no ray cluster 'third'; ray clusters: research, second" in err.value.message
    with pytest.raises(InputError) as err:
        start(recipe="on-ray", team="rl", created_by=admin_user, cluster="second", node="gpu-a")
    assert err.value.field == "node" and "whose scheduler places it" in err.value.message
    with pytest.raises(InputError) as err:
        start(recipe="on-ray", team="rl", created_by=admin_user, cluster={"name": "second"})
    assert err.value.field == "cluster" and "the name of a registered cluster" in err.value.message
    Recipe.define("on-node", {"argv": ["python", "train.py"]}, admin_user)
    with pytest.raises(InputError) as err:
        start(recipe="on-node", team="rl", created_by=admin_user, cluster="second")
    assert err.value.field == "cluster" and "runs on a node's launch worker, not on a cluster" in err.value.message
    assert start(recipe="on-ray", team="rl", created_by=admin_user, cluster="second").launch.cluster.name == "second"
    assert Launch.objects.count() == 2, "nothing is created for a refused launch"


@pytest.mark.django_db(transaction=True)
def test_a_cluster_running_a_live_job_cannot_be_forgotten(client, admin_user):
    from launch.kind import start

    Recipe.define("on-ray", {"argv": ["python", "train.py"], "executor": "ray"}, admin_user)
    Cluster.register(RAY, admin_user)
    job = start(recipe="on-ray", team="rl", created_by=admin_user)
    client.force_login(admin_user)
    refused = client.delete("/api/clusters/research")
    assert refused.status_code == 400 and f"runs job(s) {job.pk}: stop them first" in refused.json()["error"]
    job.request_stop()
    assert client.delete("/api/clusters/research").json() == {"deleted": "research", "ended": []}
    assert Launch.objects.get(pk=job.pk).cluster is None and not Cluster.objects.exists()

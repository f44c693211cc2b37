"""The example recipes (launch/examples/recipes.yaml) are valid, and the scripts they run report to a real run.

Each script test renders its recipe's own argv the way a launch will (launch.params.render with the
recipe's parameters and Yardstick's placeholders: {python} is this interpreter, {yardstick} this
checkout, {job_dir} a fresh folder) and runs it as a real process against the live Yardstick's MLflow
tracking API, with what a node's worker sets: MLFLOW_TRACKING_URI, a reporter's MLFLOW_TRACKING_TOKEN,
MLFLOW_RUN_ID of a run made first (so its job exists) and MLFLOW_EXPERIMENT_NAME. What the job then
holds (its Step rows, status) is read from the database, the checkpoints from the job's folder.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch.models import Recipe, clean_definition, import_all
from launch.params import Param, render
from tests.tracking.conftest import mlflow_as, mlflow_client, reporter  # noqa: F401 - fixtures
from tests.waiting import wait_for
from trainer.models import ENDED, Job

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "launch" / "examples" / "recipes.yaml"
EXPERIMENT = "examples"


def recipes():
    return {r["name"]: r for r in yaml.safe_load(RECIPES.read_text())["recipes"]}


def recipe_argv(name, job_dir, values=(), roots=(), resume=None, init_from=None, models=None):
    """The argv a launch of recipe `name` runs: its defaults overridden by `values` (checked by each
    parameter), a path parameter's root moved by `roots` ({name: new root}), resume_argv added with
    {checkpoint} = `resume`; {models} = `models`."""
    raw = recipes()[name]
    specs = [{**spec, "root": str(roots[spec["name"]])} if spec["name"] in dict(roots) else spec
             for spec in raw["params"]]
    definition = clean_definition({**raw, "params": specs})
    params = {p.name: p for p in map(Param, definition["params"])}
    filled = {n: p.default for n, p in params.items()}
    filled.update({n: params[n].value(v) for n, v in dict(values).items()})
    filled.update(python=sys.executable, yardstick=str(ROOT), job_dir=str(job_dir), experiment=EXPERIMENT,
                  init_from=str(init_from or ""), checkpoint=str(resume or ""), models=str(models or ""))
    return render(definition["argv"] + (definition["resume_argv"] if resume else []), filled)


# ---- (a) the recipes themselves ------------------------------------------------------------------------

def test_every_example_recipe_is_a_valid_definition_and_imports_in_one_go(db):
    document = yaml.safe_load(RECIPES.read_text())
    by_name = {r["name"]: r for r in document["recipes"]}
    assert set(by_name) == {"trl-grpo", "trl-grpo-continue", "trl-grpo-cpu", "trl-grpo-cpu-continue", "verl-grpo",
                            "verl-grpo-ray",
                            "nemo-rl-grpo-math", "nemo-rl-grpo-math-slurm", "plain-script", "builtin-grpo",
                            "builtin-grpo-continue", "builtin-grpo-cpu", "builtin-grpo-cpu-continue",
                            "builtin-grpo-setup", "builtin-grpo-cpu-setup", "eval-checkpoint"}
    setups = {r["setup"] for r in by_name.values() if r.get("setup")}
    assert setups == {"builtin-grpo-setup", "builtin-grpo-cpu-setup"} and setups <= set(by_name)
    for name, raw in by_name.items():
        definition = clean_definition(raw)
        assert definition["framework"] and definition["description"], name
        assert definition["score_key"] or name in setups, f"{name}: a run is scored (a setup scores nothing)"
        assert all(p["help"] for p in definition["params"]), f"{name}: every parameter says what it is"
        for item in definition["argv"]:  # a script of Yardstick's that a recipe runs is in this checkout
            if item.startswith("{yardstick}/"):
                assert (ROOT / item.removeprefix("{yardstick}/")).is_file(), item
    # Those that can go on from a checkpoint say how; NeMo RL resumes from its checkpoint_dir by itself
    # and an evaluation starts again.
    resumable = {n for n, r in by_name.items() if any("{checkpoint}" in a for a in r.get("resume_argv", []))}
    assert resumable == set(by_name) - {"nemo-rl-grpo-math", "nemo-rl-grpo-math-slurm", "eval-checkpoint"} - setups
    assert "{init_from}" in " ".join(by_name["trl-grpo-continue"]["argv"] + by_name["eval-checkpoint"]["argv"])
    # Each training recipe a campaign or a sweep's trial starts from has a continuation taking the same parameters.
    for first in ("trl-grpo", "trl-grpo-cpu", "builtin-grpo", "builtin-grpo-cpu"):
        following = by_name[f"{first}-continue"]
        assert "{init_from}" in following["argv"], first
        assert {p["name"] for p in by_name[first]["params"]} - {"model"} <= {p["name"] for p in following["params"]}
        assert following["devices"] == by_name[first]["devices"], first

    assert import_all(document) == {"created": list(by_name), "updated": [], "unchanged": []}
    assert import_all(document)["unchanged"] == list(by_name)
    assert Recipe.objects.get(name="verl-grpo").definition["resume_argv"] == [
        "trainer.resume_mode=resume_path", "trainer.resume_from_path={checkpoint}"]
    on_ray = Recipe.objects.get(name="verl-grpo-ray").definition
    assert (on_ray["executor"], on_ray["shared_dir"], on_ray["devices"]) == (
        "ray", "/mnt/shared/yardstick", {"kind": "cpu", "count": 1}), "veRL's driver asks Ray for its GPUs itself"
    assert on_ray["argv"] == Recipe.objects.get(name="verl-grpo").definition["argv"]
    on_slurm = Recipe.objects.get(name="nemo-rl-grpo-math-slurm").definition
    assert (on_slurm["executor"], on_slurm["slurm"]) == ("slurm", {"partition": "gpu", "time_limit": "04:00:00",
                                                                   "nodes": 1, "gpus_as": "gpus-per-node"})
    assert on_slurm["argv"] == Recipe.objects.get(name="nemo-rl-grpo-math").definition["argv"]


def test_a_recipes_own_argv_renders_to_one_argument_per_item():
    argv = recipe_argv("verl-grpo", "/jobs/7", values={"total_training_steps": 3}, resume="/jobs/7/global_step_2")
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert {"trainer.total_training_steps=3", "trainer.default_local_dir=/jobs/7", f"trainer.project_name={EXPERIMENT}",
            "trainer.logger=['console','mlflow']", "trainer.resume_from_path=/jobs/7/global_step_2"} <= set(argv)
    assert argv[-2] == "trainer.resume_mode=resume_path"


# ---- the scripts, against a live Yardstick -----------------------------------------------------------

@pytest.fixture
def job_run(mlflow_client, tmp_path):
    """A new MLflow run (so a job) in EXPERIMENT, as Yardstick makes one for a launched job: returns
    (tracking Run, the environment a worker gives the launched process, the job's folder)."""
    from tracking.models import Run

    experiment = mlflow_client.get_experiment_by_name(EXPERIMENT)
    experiment_id = experiment.experiment_id if experiment else mlflow_client.create_experiment(EXPERIMENT)
    run_id = mlflow_client.create_run(experiment_id, run_name="launched").info.run_id
    env = {
        **os.environ,  # MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN, set by mlflow_as
        "MLFLOW_RUN_ID": run_id, "MLFLOW_EXPERIMENT_NAME": EXPERIMENT,
        "YARDSTICK_STOP_CHECK_S": "0",  # ask at every step: the test waits for the stop
        "PYTHONUNBUFFERED": "1", "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
    }
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    return Run.objects.select_related("job").get(run_id=run_id), env, job_dir


def launch(argv, env, log, timeout=120):
    """Run `argv` to its end with its output in `log`; fail with that output unless it exits 0."""
    with open(log, "w") as out:
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    text = Path(log).read_text(errors="replace")
    assert proc.returncode == 0, f"{argv[1]} exited {proc.returncode}:\n{text[-4000:]}"
    return text


def stop_after(run, argv, env, log, steps):
    """Start `argv`, press Stop on its job once `steps` rows are logged, and return its output once it has
    ended by itself (it must exit 0)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(logged_steps(run)) >= steps, 60, f"{steps} steps logged", every_s=0.1, logs=[log])
        run.job.refresh_from_db()
        assert run.job.request_stop(by="otto")
        assert proc.wait(timeout=60) == 0, Path(log).read_text(errors="replace")[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Path(log).read_bytes().decode()  # as written: read_text would turn each \r into a \n


def logged_steps(run):
    from trainer.models import Step

    return list(Step.objects.filter(job=run.job).order_by("step").values_list("step", flat=True))


def times_logged(run, key, step):
    """How many values of `key` the run logged at `step` (a run that started again at 0 logs one twice)."""
    return run.metrics.filter(key=key, step=step).count()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A folder holding a tiny random GPT-2 and the character tokenizer (tests/trl_tiny.py), as a node's
    /models/<name> would: returns (its root, its name)."""
    from tests.trl_tiny import char_tokenizer
    from tests.trl_tiny import tiny_model as model

    root = tmp_path_factory.mktemp("models")
    tokenizer = char_tokenizer()
    tokenizer.save_pretrained(root / "tiny-gpt2")
    model(tokenizer).save_pretrained(root / "tiny-gpt2")
    return root, "tiny-gpt2"


# ---- (b) TRL ----------------------------------------------------------------------------------------

# ---- (b) TRL: tests/launch/test_trl_launch_browser.py launches the trl-grpo recipe as shipped, from the Start
# form through Stop and Resume, on the real launch path.


@pytest.mark.slow
def test_trl_grpo_cpu_as_shipped_makes_its_tiny_model_once_and_logs_steps_on_a_launch_worker(
        launch_worker, admin_user, operator, launch_data_dir):
    """The first run a laptop can make: the shipped recipe, imported unchanged, launched on the real launch worker
    with no model anywhere; it makes the tiny model under <data dir>/models, downloads nothing and logs its steps.
    A second launch uses the model the first made."""
    from launch.kind import start
    from trainer.models import Status

    import_all({"recipes": [recipes()["trl-grpo-cpu"]]}, admin_user)
    model = launch_data_dir / "models" / "tiny-arithmetic"
    assert not model.exists()

    def run(**params):
        job = start(recipe="trl-grpo-cpu", params={"save_steps": 1000, "eval_steps": 2, **params}, team="research",
                    name="first run", created_by=operator)
        return wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=ENDED).first(), 180,
                        f"job {job.pk} to end", every_s=0.5)

    first = run(max_steps=3)
    text = output_of(first)
    assert first.status == Status.COMPLETED, f"{first.error}\n{text[-3000:]}"
    assert first.launch.argv[2:5] == ["--model_name_or_path", str(model), "--make_tiny_model"]
    assert "HF_HUB_OFFLINE" in first.launch.env_names
    assert f"made the tiny model in {model}" in text and (model / "config.json").is_file()
    assert "FutureWarning" not in text, "a first run's output is its steps, not transformers' notices"
    logged = sorted(first.steps.values_list("step", flat=True))
    assert {1, 2, 3} <= set(logged) and logged[-1] == first.steps_done == 3, logged
    assert first.steps.get(step=2).metrics["eval_reward"] >= 0, "its score, at eval_steps"
    assert (Path(first.launch.job_dir) / "checkpoint-3").is_dir()

    made_at = (model / "config.json").stat().st_mtime_ns
    second = run(max_steps=1, eval_steps=0)
    assert second.status == Status.COMPLETED and "made the tiny model" not in output_of(second)
    assert (model / "config.json").stat().st_mtime_ns == made_at, "the model is made once, on first use"


def test_trl_grpo_says_what_a_worker_without_trl_must_install():
    """`make run` installs no TRL: on a worker without it the job fails saying how to get it, not with a traceback.
    (-S: a Python with no site-packages, as a fresh `make run` venv has none of them.)"""
    proc = subprocess.run([sys.executable, "-S", str(ROOT / "launch/examples/trl_grpo.py"), "--model_name_or_path", "m",
                           "--output_dir", "o"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith(
        "trl_grpo.py needs torch, transformers, trl, datasets, mlflow, yardstick_mlflow in the launch worker's Python")
    assert "run `make examples` (pip install -r requirements-examples.txt and ./client), then Start again" in proc.stderr


def output_of(job):
    from launch.models import OutputLine

    return "\n".join(OutputLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


# ---- (c) a plain script -----------------------------------------------------------------------------

@pytest.mark.slow
def test_plain_script_stops_when_asked_with_a_checkpoint_and_resumes_with_its_count(job_run, tmp_path):
    from trainer.models import Status

    run, env, job_dir = job_run
    argv = recipe_argv("plain-script", job_dir, values={"steps": 1000, "sleep_s": 0.05, "save_every": 1000})
    text = stop_after(run, argv, env, tmp_path / "plain.log", steps=3)
    stopped_at = int(re.search(r"stopped as asked at step (\d+)", text).group(1))
    assert [p.name for p in job_dir.glob("step_*")] == [f"step_{stopped_at}"]
    assert "\r[" in text, "a carriage-return progress bar"
    run.refresh_from_db()
    run.job.refresh_from_db()
    assert (run.status, run.job.status) == ("KILLED", Status.STOPPED)
    assert run.job.steps_done == stopped_at == logged_steps(run)[-1]

    resumed = recipe_argv("plain-script", job_dir, resume=job_dir / f"step_{stopped_at}",
                          values={"steps": stopped_at + 3, "sleep_s": 0, "save_every": 1000})
    text = launch(resumed, env, tmp_path / "resumed.log")
    assert f"training steps {stopped_at + 1} to {stopped_at + 3}" in text
    assert (job_dir / f"step_{stopped_at + 3}").is_dir()
    run.refresh_from_db()
    run.job.refresh_from_db()
    assert logged_steps(run)[-1] == run.job.steps_done == stopped_at + 3
    assert times_logged(run, "train/loss", 1) == 1, "the count goes on: step 1 is not logged again"
    assert (run.status, run.job.status) == ("FINISHED", Status.COMPLETED)


# ---- (d) an evaluation ------------------------------------------------------------------------------

@pytest.mark.slow
def test_eval_checkpoint_logs_its_score_at_the_checkpoints_step(job_run, tiny_model, tmp_path):
    from trainer.models import Status

    run, env, job_dir = job_run
    root, name = tiny_model
    checkpoint = tmp_path / "trained" / "checkpoint-7"  # as trl_grpo.py leaves one: the model and its state
    shutil.copytree(root / name, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 7}))
    argv = recipe_argv("eval-checkpoint", job_dir, values={"num_prompts": 16}, init_from=checkpoint)
    text = launch(argv, env, tmp_path / "eval.log")
    assert re.search(r"\(step 7\) on arithmetic: pass@1 \d+\.\d points", text), text
    run.refresh_from_db()
    run.job.refresh_from_db()
    assert logged_steps(run) == [7]
    step = run.job.steps.get(step=7)
    assert 0 <= step.eval_pass1 <= 100 and step.eval_pass1 == step.metrics["eval/pass1"]
    assert 0 <= step.metrics["eval/reward_mean"] <= 1
    assert (run.status, run.job.status) == ("FINISHED", Status.COMPLETED)


# ---- Yardstick's own trainer as a launched script ---------------------------------------------------

@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A base-policy cache with a tiny arithmetic base (one layer, a few supervised steps): no minute of
    pretraining."""
    from trainer.rl.model import GPTConfig
    from trainer.rl.pretrain import pretrain

    path = tmp_path_factory.mktemp("base")
    pretrain("arithmetic", path, "cpu", model_config=GPTConfig(n_layer=1, n_head=2, n_embd=32), max_steps=20,
             batch_size=32, target_pass1=101.0, probe_every=1000, probe_size=4)
    return path


@pytest.mark.slow
def test_builtin_grpo_reports_its_steps_and_evaluations_and_checkpoints(job_run, tiny_base, tmp_path):
    run, env, job_dir = job_run
    argv = recipe_argv("builtin-grpo", job_dir, values={"steps": 3, "eval_every": 3, "checkpoint_every": 2,
                                                        "prompts_per_step": 8, "group_size": 4})
    text = launch(argv + ["--base_dir", str(tiny_base), "--config", "eval_size=16", "--config", "max_new_tokens=6",
                          "--device", "cpu"], env, tmp_path / "builtin.log")
    assert "finished at step 3" in text
    assert sorted(p.name for p in job_dir.glob("step_*")) == ["step_2", "step_3"]
    assert (job_dir / "step_3" / "trainer.pt").is_file()
    run.job.refresh_from_db()
    assert logged_steps(run) == [0, 1, 2, 3] and run.job.steps_done == 3
    steps = {s.step: s for s in run.job.steps.all()}
    assert steps[0].eval_pass1 is not None and steps[3].eval_pass1 is not None, "before the first step, at the end"
    assert steps[1].eval_pass1 is None and "train/reward_mean" in steps[1].metrics


@pytest.mark.slow
def test_builtin_grpo_cpu_continue_starts_a_new_run_from_another_runs_policy(job_run, tiny_base, tmp_path):
    """A campaign's next run (or a Continue) of the built-in trainer: step 0 again, a fresh optimizer, the policy
    and KL reference of the checkpoint it starts from, the values it was given."""
    import torch

    from trainer.rl import TrainConfig, Trainer

    run, env, job_dir = job_run
    source = Trainer(TrainConfig(env="arithmetic", steps=4, prompts_per_step=4, group_size=2, eval_size=8,
                                 max_new_tokens=6), tiny_base, "cpu")
    source.train_step()
    start = tmp_path / "earlier-job" / "step_1"
    source.save_checkpoint(start / "trainer.pt")
    argv = recipe_argv("builtin-grpo-cpu-continue", job_dir, init_from=start, models=tiny_base,
                       values={"steps": 2, "eval_every": 2, "checkpoint_every": 2, "prompts_per_step": 8,
                               "group_size": 4, "lr": 0.0002})
    text = launch(argv + ["--config", "eval_size=16", "--config", "max_new_tokens=6"], env, tmp_path / "continue.log")
    assert f"policy from {start / 'trainer.pt'}" in text and "finished at step 2" in text
    saved = torch.load(job_dir / "step_2" / "trainer.pt", map_location="cpu", weights_only=True)
    assert saved["step"] == 2 and saved["config"]["lr"] == 0.0002 and saved["config"]["steps"] == 2
    policy = source.policy.state_dict()
    assert all(torch.equal(saved["reference"][k], policy[k]) for k in policy), "its KL reference: where it started"
    run.job.refresh_from_db()
    assert logged_steps(run) == [0, 1, 2]

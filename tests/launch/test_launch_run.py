"""Launched jobs end to end on a real launch worker: the argv as the recipe wrote it, the run's variables, the
output kept and shown, the exit status, the three stop steps, GPUs given out of the free ones."""

import json
import shlex
import sys

import pytest

from launch.models import Launch, OutputLine
from tests.launch.conftest import GPUS
from tests.waiting import wait_for
from trainer.models import Job, Stint
from yardstick.models import ApiToken

PY = sys.executable
pytestmark = pytest.mark.slow


def launch(client, recipe, **body):
    resp = client.post("/api/launch", json.dumps({"recipe": recipe, "team": "research", **body}),
                       content_type="application/json")
    assert resp.status_code == 201, resp.content
    return Job.objects.get(pk=resp.json()["id"])


def ended(job, timeout_s=60):
    return wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["completed", "failed", "stopped",
                                                                        "budget_exhausted"]).first(),
                    timeout_s=timeout_s, what=f"job {job.pk} to end")


def output(job):
    return list(OutputLine.objects.filter(job=job).order_by("seq").values_list("stream", "text"))


SHOW_ARGV_AND_ENV = ("import json, os, sys; print(json.dumps(sys.argv[1:])); "
                     "print(json.dumps(dict((k, os.environ.get(k)) for k in ['MLFLOW_RUN_ID', 'YARDSTICK_JOB_ID', "
                     "'CUDA_VISIBLE_DEVICES', 'DATABASE_URL', 'MLFLOW_TRACKING_URI']))); "
                     "print('token' if os.environ['MLFLOW_TRACKING_TOKEN'].startswith('ys_') else 'no token')")


def test_a_hostile_value_is_one_literal_argument_and_the_run_gets_its_own_variables(
        launch_worker, recipe, operator, client, live_server):
    recipe("show", [PY, "-c", SHOW_ARGV_AND_ENV, "--name={label}", "{label}"],
           params=[{"name": "label", "kind": "string", "default": "x", "help": "any text"}])
    client.force_login(operator)
    hostile = "; rm -rf / $(id) `id`"
    job = launch(client, "show", params={"label": hostile})

    job = ended(job)
    assert job.status == "completed", job.error
    lines = [text for stream, text in output(job) if stream == "stdout"]
    assert json.loads(lines[0]) == [f"--name={hostile}", hostile]
    env = json.loads(lines[1])
    assert env == {"MLFLOW_RUN_ID": job.run.run_id, "YARDSTICK_JOB_ID": str(job.pk), "CUDA_VISIBLE_DEVICES": "",
                   "DATABASE_URL": None, "MLFLOW_TRACKING_URI": live_server.url}
    assert lines[2] == "token"
    launch_row = Launch.objects.get(pk=job.pk)
    assert launch_row.argv[-2:] == [f"--name={hostile}", hostile] and launch_row.exit_code == 0
    started = next(text for stream, text in output(job) if stream == "yardstick" and text.startswith("started on "))
    assert shlex.split(started.split(": ", 1)[1]) == launch_row.argv, "the started line quotes argv as a shell would"
    assert "MLFLOW_TRACKING_TOKEN" in launch_row.env_names and "DATABASE_URL" not in launch_row.env_names
    assert ApiToken.objects.get(pk=launch_row.token_id).revoked, "its token is revoked once it ends"
    [stint] = Stint.objects.filter(job=job)
    assert (stint.device, stint.ended_at is not None, stint.end_reason) == ("cpu", True, "completed")


def test_a_traceback_fails_the_job_with_its_last_line_and_a_signal_is_named(launch_worker, recipe, operator, client):
    recipe("boom", [PY, "-c", "print('working'); raise ValueError('the reward model is gone')"])
    recipe("killed", [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    client.force_login(operator)
    boom, killed = launch(client, "boom"), launch(client, "killed")

    boom, killed = ended(boom), ended(killed)
    assert boom.status == "failed"
    assert boom.error.splitlines()[0] == "exited with status 1: ValueError: the reward model is gone"
    assert "Traceback (most recent call last):" in boom.error
    assert killed.status == "failed" and killed.error == "killed by SIGKILL (signal 9)"


def test_two_one_gpu_jobs_get_a_gpu_each_a_third_waits_1st_in_line_and_starts_on_the_freed_one_within_2_s(
        launch_worker, recipe, operator, client):
    recipe("hold", [PY, "-c", "import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(60)"],
           devices={"kind": "cuda", "count": 1}, stop_grace_s=[0, 5])
    client.force_login(operator)
    first, second = launch(client, "hold"), launch(client, "hold")

    third = launch(client, "hold")
    said = client.get(f"/api/jobs/{third.pk}").json()
    assert (said["status"], said["in_line"], said["line_place"]) == ("queued", True, 1), said
    assert said["waiting_for"] == ("waiting for 1 × GPU in the shared pool: 1st in line (every GPU that would do is "
                                   "held)")
    workers = client.get("/api/workers").json()["workers"]
    [mine] = [w for w in workers if w["name"].startswith("launch@")]
    assert mine["free"]["gpus"] == [] and sorted(mine["held"]["gpus"].values()) == [first.pk, second.pk]

    seen = wait_for(lambda: sorted(t for j in (first, second) for s, t in output(j) if s == "stdout")
                    if len([1 for j in (first, second) for s, t in output(j) if s == "stdout"]) == 2 else None,
                    what="both jobs to print their devices")
    assert seen == ["0", "1"]
    stints = {s.job_id: s.device for s in Stint.objects.filter(job__in=[first, second])}
    assert sorted(stints.values()) == sorted(GPUS)
    freed = dict(Launch.objects.filter(pk=first.pk).values_list("job_id", "gpus"))[first.pk]

    assert client.post(f"/api/jobs/{first.pk}/stop").status_code == 200
    first = ended(first)
    third = wait_for(lambda: Job.objects.filter(pk=third.pk, status="running").first(), what="the third to start")
    assert (third.started_at - first.finished_at).total_seconds() <= 2, (first.finished_at, third.started_at)
    assert (third.placed_at - third.queued_at).total_seconds() > 0 and third.waited_s() > 0
    assert Launch.objects.get(pk=third.pk).gpus == freed
    wait_for(lambda: [t for s, t in output(third) if s == "stdout"] == [str(freed[0])], what="the third's device")
    for job in (second, third):
        assert client.post(f"/api/jobs/{job.pk}/stop").status_code == 200
    assert {ended(second).status, ended(third).status} == {"stopped"}


def test_stop_escalates_flag_then_sigterm_then_sigkill_and_says_which_ended_it(
        launch_worker, recipe, operator, client):
    # Ends itself when it reads the flag (the client's should_stop), as a run with the callback does.
    recipe("polite", [PY, "-c", "import os, time, yardstick_mlflow as y\n"
                                "while not y.should_stop(os.environ['MLFLOW_RUN_ID']): time.sleep(0.2)\n"
                                "print('stopping at a checkpoint')"], stop_grace_s=[6, 5])
    recipe("deaf", [PY, "-c", "import time\nwhile True: time.sleep(0.2)"], stop_grace_s=[1, 5])
    recipe("stubborn", [PY, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                  "print('ready', flush=True)\nwhile True: time.sleep(0.2)"], stop_grace_s=[1, 1])
    client.force_login(operator)
    jobs = {name: launch(client, name) for name in ("polite", "deaf", "stubborn")}
    for job in jobs.values():
        wait_for(lambda job=job: Launch.objects.filter(pk=job.pk, pid__isnull=False).exists(), what="it to start")
    wait_for(lambda: any(t == "ready" for _s, t in output(jobs["stubborn"])), what="the SIGTERM handler set")
    for job in jobs.values():
        assert client.post(f"/api/jobs/{job.pk}/stop").status_code == 200

    polite, deaf, stubborn = (ended(jobs[n]) for n in ("polite", "deaf", "stubborn"))
    assert polite.status == deaf.status == stubborn.status == "stopped"
    assert "the run ended itself at its stop flag (exit status 0)" in polite.status_changes.last().reason
    assert "SIGTERM ended it, 1 s after its stop flag (killed by SIGTERM)" in deaf.status_changes.last().reason
    assert "SIGKILL ended it: it ignored its stop flag and SIGTERM (2 s)" in stubborn.status_changes.last().reason
    assert [Launch.objects.get(pk=j.pk).stop_step for j in (polite, deaf, stubborn)] == ["flag", "SIGTERM", "SIGKILL"]


def test_output_is_kept_clean_capped_searched_and_downloaded(launch_worker, recipe, operator, client, settings):
    settings.LAUNCH_OUTPUT_MAX_MB = 1
    script = ("import sys\nfor i in range(3):\n    sys.stdout.write('\\rprogress %d/3' % i)\nprint()\n"
              "print('\\x1b[32mgreen\\x1b[0m')\nfor i in range(20000): print('line %06d ' % i + 'x' * 60)\n")
    recipe("chatty", [PY, "-c", script])
    client.force_login(operator)
    job = ended(launch(client, "chatty"))

    assert job.status == "completed", job.error
    stdout = [t for s, t in output(job) if s == "stdout"]
    launch_row = Launch.objects.get(pk=job.pk)
    assert launch_row.output_dropped > 0 and launch_row.output_bytes <= 2**20 * 21 // 20
    assert stdout[-1].startswith("line 019999")
    page = client.get(f"/api/jobs/{job.pk}/output", {"q": "LINE 0199", "limit": 5}).json()
    assert [line[2][:11] for line in page["lines"]] == [f"line 0199{i}" for i in (95, 96, 97, 98, 99)]
    assert page["marker"].startswith(f"… {launch_row.output_dropped:,} earlier lines dropped")
    text = b"".join(client.get(f"/api/jobs/{job.pk}/output.txt").streaming_content).decode()
    assert text.startswith("… ") and text.rstrip().endswith("[yardstick] ended completed: the command exited with "
                                                           "status 0")

    recipe("bar", [PY, "-c", script.split("for i in range(20000)")[0]])
    small = ended(launch(client, "bar"))
    assert [t for s, t in output(small) if s == "stdout"] == ["progress 2/3", "green"]


def test_an_operator_cannot_define_a_recipe_and_a_bad_value_is_refused_naming_its_parameter(
        launch_worker, recipe, operator, client):
    recipe("bounded", [PY, "-c", "pass", "{steps}"],
           params=[{"name": "steps", "kind": "integer", "default": 3, "minimum": 1, "maximum": 10}])
    client.force_login(operator)
    resp = client.post("/api/recipes", json.dumps({"name": "mine", "argv": ["id"]}), content_type="application/json")
    assert resp.status_code == 403
    for value, said in ((11, "params.steps must be from 1 to 10, got 11"), ("three", "params.steps must be an integer")):
        resp = client.post("/api/launch", json.dumps({"recipe": "bounded", "team": "t", "params": {"steps": value}}),
                           content_type="application/json")
        assert resp.status_code == 400 and resp.json()["field"] == "params.steps"
        assert resp.json()["error"].startswith(said)
    assert not Job.objects.exists(), "nothing is created for a refused launch"


STEPS = [PY, "{yardstick}/tests/launch/steps_script.py", "--out", "{job_dir}", "--steps", "{steps}"]
STEPS_PARAMS = [{"name": "steps", "kind": "integer", "default": 6, "minimum": 1, "maximum": 1000}]


def test_a_stopped_run_resumes_from_its_newest_checkpoint_into_the_same_run(launch_worker, recipe, operator, client):
    recipe("steps", STEPS, params=STEPS_PARAMS, resume_argv=["--from", "{checkpoint}"], stop_grace_s=[5, 5])
    client.force_login(operator)
    job = launch(client, "steps", params={"steps": 1000})
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= 3,
             what=lambda: f"three steps reported through MLflow; its output: {output(job)[-8:]}")
    assert client.post(f"/api/jobs/{job.pk}/stop").status_code == 200

    job = ended(job)
    assert job.status == "stopped" and "ended itself at its stop flag" in job.status_changes.last().reason
    stopped_at = job.steps_done
    launch_row = Launch.objects.get(pk=job.pk)
    assert launch_row.checkpoints[-1] == f"step_{stopped_at}" and job.checkpoint_step == stopped_at
    resp = client.post(f"/api/jobs/{job.pk}/resume")
    assert resp.status_code == 200, resp.content
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= stopped_at + 2, what="steps after the resume")
    assert client.post(f"/api/jobs/{job.pk}/stop").status_code == 200
    job = ended(job)
    launch_row.refresh_from_db()
    assert launch_row.argv[-2:] == ["--from", f"{launch_row.job_dir}/step_{stopped_at}"]
    assert f"starting at step {stopped_at}" in [t for _s, t in output(job)]
    steps = sorted(job.steps.values_list("step", flat=True))
    assert steps == list(range(1, job.steps_done + 1)), "one run, its curve goes on where it stopped"


def test_a_run_without_a_checkpoint_offers_restart_not_resume(launch_worker, recipe, operator, client):
    recipe("no-ckpt", [PY, "-c", "raise SystemExit(3)"], resume_argv=["--from", "{checkpoint}"])
    client.force_login(operator)
    job = ended(launch(client, "no-ckpt"))
    assert job.status == "failed" and job.error == "exited with status 3"
    resp = client.post(f"/api/jobs/{job.pk}/resume")
    assert resp.status_code == 409
    assert "has no checkpoint in its output directory: Restart starts it again" in resp.json()["error"]
    resp = client.post(f"/api/jobs/{job.pk}/restart")
    assert resp.status_code == 201
    again = Job.objects.get(pk=resp.json()["id"])
    assert (again.launch.recipe_name, again.team, again.env) == ("no-ckpt", job.team, job.env)
    assert ended(again).status == "failed"


def test_continue_starts_the_next_run_from_the_last_ones_final_checkpoint(launch_worker, recipe, operator, client):
    recipe("steps", STEPS, params=STEPS_PARAMS)
    recipe("steps-continue", [*STEPS, "--from", "{init_from}"], params=STEPS_PARAMS)
    client.force_login(operator)
    first = ended(launch(client, "steps", params={"steps": 4}))
    assert first.status == "completed" and first.kept_checkpoint_steps() == [2, 4]

    resp = client.post("/api/launch", json.dumps({"recipe": "steps-continue", "team": "research"}),
                       content_type="application/json")
    assert resp.status_code == 400 and resp.json()["field"] == "init_from"
    second = ended(launch(client, "steps-continue", params={"steps": 6}, init_from=first.pk))
    assert second.status == "completed" and (second.init_from_id, second.init_step) == (first.pk, 4)
    assert second.launch.argv[-2:] == ["--from", f"{first.launch.job_dir}/step_4"]
    assert sorted(second.steps.values_list("step", flat=True)) == [5, 6]


def test_the_budget_stops_a_launched_run_through_the_same_steps(launch_worker, recipe, operator, client):
    recipe("steps", STEPS, params=STEPS_PARAMS, resume_argv=["--from", "{checkpoint}"], stop_grace_s=[5, 5])
    client.force_login(operator)
    job = launch(client, "steps", params={"steps": 1000}, budget_usd="5")
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= 2, what="two steps")
    assert job.request_budget_stop("spend reached the budget of $5") is True  # what costs/budget.py calls

    job = ended(job)
    assert job.status == "budget_exhausted"
    assert job.status_changes.last().reason.startswith("spend reached the budget of $5; the run ended itself at "
                                                       "its stop flag")
    assert Launch.objects.get(pk=job.pk).checkpoints[-1] == f"step_{job.steps_done}", "resumable once raised"


def test_a_recipe_may_name_its_own_checkpoint_pattern(launch_worker, recipe, operator, client):
    from launch.models import Recipe
    from yardstick.inputs import InputError

    with pytest.raises(InputError, match="one group, its step"):
        Recipe.define("bad", {"argv": ["x"], "checkpoint_pattern": "ckpt"})
    recipe("own", [PY, "-c", "import os, sys; [os.makedirs(f'{{sys.argv[1]}}/ckpt-{{n}}') for n in (3, 10)]",
                   "{job_dir}"], checkpoint_pattern=r"ckpt-(\d+)", resume_argv=["{checkpoint}"])
    client.force_login(operator)
    job = ended(launch(client, "own"))
    assert job.status == "completed" and job.kept_checkpoint_steps() == [3, 10] and job.checkpoint_step == 10


def test_a_queued_launch_whose_worker_went_away_goes_back_in_line_at_its_place(db, recipe, operator, settings):
    from datetime import timedelta

    from django.utils import timezone

    from launch.kind import requeue_orphans, start
    from trainer.models import Worker

    Worker.report("launch@gone", "gone", ["launch@gone"], ["cpu"], cores=4,
                  gpus=[{"index": 0, "uuid": GPUS[0], "name": "NVIDIA H100", "memory_mib": 81920}])
    recipe("gpu", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1})
    job = start(recipe="gpu", team="research", created_by=operator)  # not sent: no commit in a db test
    later = start(recipe="gpu", team="research", created_by=operator)
    assert requeue_orphans() == [] and not job.in_line and later.in_line
    Worker.objects.filter(name="launch@gone").update(seen_at=timezone.now() - timedelta(hours=1))

    [back] = requeue_orphans()
    job.refresh_from_db()
    later.refresh_from_db()
    assert back.pk == job.pk and job.status == "queued" and job.in_line and Launch.objects.get(pk=job.pk).gpus == []
    assert (job.line_place, later.line_place) == (1, 2), "it keeps its place, ahead of the later one"
    assert job.waiting_for == "waiting for 1 × GPU in the shared pool: 1st in line (no live worker serves it now)"
    assert not job.claim(), "a job in line is no worker's to claim"
    Worker.report("launch@back", "back", ["launch@back"], ["cpu"], cores=4,
                  gpus=[{"index": 0, "uuid": GPUS[0], "name": "NVIDIA H100", "memory_mib": 81920}])
    from trainer.queue import place_waiting

    assert [j.pk for j in place_waiting().placed] == [job.pk]
    assert Launch.objects.get(pk=job.pk).worker == "launch@back"


def test_a_gpu_a_built_in_job_trains_on_is_not_given_to_a_launch(db, recipe, operator):
    from launch.kind import start
    from trainer.models import Worker
    from trainer.workers import describe

    gpus = [{"index": i, "uuid": uuid, "name": "NVIDIA H100", "memory_mib": 81920} for i, uuid in enumerate(GPUS)]
    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu"], cores=4, gpus=gpus)
    built_in = Job.objects.create(name="grpo", team="research", env="arithmetic", config={}, status="running",
                                  placed_on="jobs@gpu-a")
    Stint.objects.create(job=built_in, node="gpu-a", device=GPUS[0], pid=1)  # the node's jobs worker trains on GPU 0
    recipe("gpu", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1})

    job = start(recipe="gpu", team="research", created_by=operator)
    assert Launch.objects.get(pk=job.pk).gpus == [1]
    waits = start(recipe="gpu", team="research", created_by=operator)
    assert waits.in_line and "1st in line" in waits.waiting_for
    assert describe(Worker.objects.get(name="launch@gpu-a")) == (
        f"launch@gpu-a: GPUs none free of 2, held: 0 (job {built_in.pk}), 1 (job {job.pk}); 4 of 4 cores free")

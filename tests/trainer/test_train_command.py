"""`manage.py train`: a job in the foreground, through the same runner as the workers."""

import json

import pytest
from django.core.management import CommandError, call_command

from tests.trainer.helpers import STEP_KEYS, TINY, manage_cmd, run_subprocess
from trainer.models import Job, Stint


def test_train_json_prints_the_final_metrics_as_one_json_object(transactional_db, child_env):
    proc = run_subprocess(
        manage_cmd("train", "--env", "arithmetic", "--steps", "2", "--seed", "1", "--json", "--name", "smoke",
                   "--config", json.dumps({**TINY, "eval_every": 1})),
        env=child_env,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "completed" and result["steps_done"] == 2 and result["name"] == "smoke"
    assert set(STEP_KEYS) <= set(result)
    assert result["eval/pass1"] == result["final_pass1"]
    assert 0 <= result["baseline_pass1"] <= 100
    job = Job.objects.get(pk=result["job_id"])
    assert job.status == "completed" and job.steps_done == 2 and job.config["seed"] == 1
    assert job.steps.count() == 3
    assert Stint.objects.get(job=job).ended_at is not None


def test_key_value_overrides_reach_the_config(db, data_dir, capsys):
    call_command("train", "--steps", "1", "--json", "--config", json.dumps(TINY),
                 "--config", "lr=0.001", "--config", "lr_schedule=cosine")
    job = Job.objects.get()
    assert job.config["lr"] == 0.001 and job.config["lr_schedule"] == "cosine"
    assert job.status == "completed"
    assert json.loads(capsys.readouterr().out)["job_id"] == job.pk


@pytest.mark.parametrize("args, says", [
    (["--steps", "0"], "--steps: steps must be an integer from 1 to 100000, got 0"),
    (["--env", "chess"], "--env: env must be one of arithmetic, toolcalc, got 'chess'"),
    (["--config", "group_size=1"], "--config group_size: group_size must be an integer from 2 to 256, got 1"),
    (["--config", "stepz=3"], "--config stepz: unknown field 'stepz'; accepted fields are env, steps"),
    (["--config", "nonsense"], "--config: 'nonsense' must be key=value (e.g. lr=1e-3) or a JSON object"),
    (["--config", "{bad"], "--config: '{bad' is not valid JSON"),
    (["--device", "tpu"], "--device: device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    (["--budget-usd", "-1"], "--budget-usd: budget_usd must be a number of dollars >= 0"),
    (["--team", ""], "--team: team is required"),
    (["--steps", "x"], "argument --steps: invalid int value: 'x'"),
])
def test_bad_flags_are_a_command_error_naming_the_flag(db, data_dir, args, says):
    with pytest.raises(CommandError) as caught:
        call_command("train", *args)
    assert says in str(caught.value)
    assert Job.objects.count() == 0

"""A campaign loop of launched runs: run 2 starts from run 1's final checkpoint ({init_from}), an evaluation recipe
scores each run's checkpoint (the retention evals the campaign cannot run itself), and the campaign's dollars are
its runs' dollars, their evaluation jobs' included."""

import json
import sys
from decimal import Decimal

import pytest

from campaigns.figures import summary
from campaigns.models import Campaign
from costs.intelligence import jobs_money
from launch.models import OutputLine
from tests.campaigns.charge import charge
from tests.launch.test_launch_run import STEPS, STEPS_PARAMS
from tests.waiting import wait_for
from trainer.models import Job

pytestmark = pytest.mark.slow
PY = sys.executable
# Scores a step_N checkpoint: N × 10 points, logged as eval/pass1 at step N of the evaluation job's run.
EVAL = ("import mlflow, pathlib, sys\nstep = int(pathlib.Path(sys.argv[1]).name.removeprefix('step_'))\n"
        "with mlflow.start_run(): mlflow.log_metric('eval/pass1', step * 10.0, step=step)\nprint('scored', step)")


def test_a_loop_of_two_launched_runs_is_scored_by_its_evaluation_recipe(launch_worker, recipe, operator, client):
    recipe("steps", STEPS, params=STEPS_PARAMS)
    recipe("steps-continue", [*STEPS, "--more", "--from", "{init_from}"], params=STEPS_PARAMS)
    recipe("score", [PY, "-c", EVAL, "{init_from}"], score_key="eval/pass1")
    client.force_login(operator)
    bad = client.post("/api/campaigns", json.dumps({"name": "c", "team": "research", "envs": ["arith"],
                                                    "run_recipe": "steps-continue"}), content_type="application/json")
    assert bad.status_code == 400 and bad.json()["field"] == "run_recipe"
    assert "names {init_from}" in bad.json()["error"]
    resp = client.post("/api/campaigns", json.dumps({
        "name": "launched loop", "team": "research", "envs": ["arith"], "run_recipe": "steps",
        "continue_recipe": "steps-continue", "run_params": {"steps": 4}, "eval_recipes": {"arith": "score"},
        "loop": True}), content_type="application/json")
    assert resp.status_code == 201, resp.content
    campaign = Campaign.objects.get(pk=resp.json()["id"])

    def two_runs_scored():
        runs = list(campaign.jobs())
        return runs if len(runs) >= 2 and campaign.retention_evals.count() >= 2 else None

    runs = wait_for(two_runs_scored, timeout_s=120, what=lambda: (
        f"two runs of the loop, each scored; loop: {Campaign.objects.get(pk=campaign.pk).loop_reason}; jobs: "
        f"{list(Job.objects.values_list('id', 'name', 'status', 'error'))}; evals: "
        f"{list(campaign.retention_evals.values_list('after_job', 'pass1'))}; output: "
        f"{[(l.job_id, l.stream, l.text) for l in OutputLine.objects.order_by('at')]}"))
    campaign.stop_loop(by="the test")  # no third run (one already queued is cancelled)
    first, second = runs[:2]
    wait_for(lambda: Job.objects.get(pk=second.pk).status == "completed", what="run 2 to complete")
    second.refresh_from_db()
    assert (second.init_from_id, second.init_step, second.launch.recipe_name) == (first.pk, 4, "steps-continue")
    assert second.launch.argv[-3:] == ["--more", "--from", f"{first.launch.job_dir}/step_4"]
    assert sorted(second.steps.values_list("step", flat=True)) == [5, 6, 7, 8], "run 2 goes on from run 1"
    evals = {e.after_job_id: e for e in campaign.retention_evals.all()}
    assert (evals[first.pk].pass1, evals[second.pk].pass1) == (40.0, 80.0)
    assert "scored by job" in evals[second.pk].policy

    scorers = campaign.eval_jobs()
    every = [first, second, *scorers[first.pk], *scorers[second.pk]]
    wait_for(lambda: all(Job.objects.get(pk=j.pk).status == "completed" for j in every), what="every job to end")
    charge(every)
    money = jobs_money([j.pk for j in every])
    figures = summary(campaign)
    by_run = {r["job_id"]: r for r in figures["runs"]}
    for run in (first, second):
        own = Decimal(money[run.pk]["cost_usd"])
        evaluation = sum(Decimal(money[e.pk]["cost_usd"]) for e in scorers[run.pk])
        assert evaluation > 0 and Decimal(by_run[run.pk]["cost_usd"]) == own + evaluation
    assert Decimal(figures["cost_usd"]) == sum(Decimal(money[j.pk]["cost_usd"]) for j in every)
    assert campaign.spent_usd() == Decimal(figures["cost_usd"])
    assert by_run[second.pk]["own_gain_points"] == 40.0 and by_run[second.pk]["own_gain_from"] == "retention evals"

    # The campaign page says where each run's dollars and gains come from.
    page = client.get(f"/campaigns/{campaign.pk}")
    assert page.status_code == 200
    html = " ".join(page.content.decode().split())
    for run in (first, second):
        scorer = scorers[run.pk][0].pk
        assert f'to score it (<a href="/jobs/{scorer}">#{scorer}</a>)' in html
    assert "the score each environment's evaluation recipe (arith: score) logged" in html


def test_the_campaigns_form_makes_a_loop_of_recipes_and_refuses_a_bad_one(db, recipe, operator, client):
    recipe("steps", STEPS, params=STEPS_PARAMS)
    recipe("steps-continue", [*STEPS, "--more", "--from", "{init_from}"], params=STEPS_PARAMS)
    recipe("score", [PY, "-c", EVAL, "{init_from}"], score_key="eval/pass1")
    client.force_login(operator)
    form = client.get("/campaigns/").content.decode()
    assert '<option value="steps">steps v1</option>' in form
    assert form.count('<option value="steps-continue">steps-continue v1</option>') == 2  # next run, scored by

    base = {"name": "from the form", "team": "research", "envs": "arith, gsm", "run_recipe": "steps",
            "continue_recipe": "steps-continue", "eval_recipe": "score"}
    resp = client.post("/campaigns/create", {**base, "run_params": "steps=4"}, follow=True)
    assert "Campaign not created: run_params must be a JSON object" in resp.content.decode()
    resp = client.post("/campaigns/create", {**base, "run_params": '{"steps": 0}'}, follow=True)
    assert "Campaign not created: params.steps must be from 1 to 1000, got 0" in resp.content.decode()
    assert not Campaign.objects.exists()

    resp = client.post("/campaigns/create", {**base, "run_params": '{"steps": 4}'})
    campaign = Campaign.objects.get()
    assert resp.status_code == 302 and resp.url == f"/campaigns/{campaign.pk}"
    assert (campaign.run_recipe, campaign.continue_recipe, campaign.run_params, campaign.eval_recipes) == (
        "steps", "steps-continue", {"steps": 4}, {"arith": "score", "gsm": "score"})

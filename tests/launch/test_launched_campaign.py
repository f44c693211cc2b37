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


# Run 1 starts from a model folder (its recipe's `start`), where the next runs' recipe puts {init_from}.
START_PARAMS = [*STEPS_PARAMS, {"name": "start", "kind": "path", "root": "/models", "default": "step_0"}]


def test_a_loop_of_two_launched_runs_is_scored_by_its_evaluation_recipe(launch_worker, recipe, operator, client):
    recipe("steps", [*STEPS, "--from", "{start}"], params=START_PARAMS)
    recipe("steps-continue", [*STEPS, "--more", "--from", "{init_from}"], params=STEPS_PARAMS)
    recipe("score", [PY, "-c", EVAL, "{init_from}"], score_key="eval/pass1", evaluates=True)
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
        return runs if len(runs) >= 2 and campaign.retention_evals.count() >= 3 else None

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
    assert (evals[None].pass1, evals[first.pk].pass1, evals[second.pk].pass1) == (0.0, 40.0, 80.0)
    assert "scored by job" in evals[second.pk].policy
    assert evals[None].policy.startswith("the starting model /models/step_0, scored by job")

    scorers = campaign.eval_jobs()
    start_scorer = scorers[None][0]
    assert start_scorer.launch.argv[-1] == "/models/step_0" and start_scorer.init_from_id is None
    assert start_scorer.launch.node == first.launch.node, "where run 1 found its model"
    every = [first, second, *scorers[first.pk], *scorers[second.pk], start_scorer]
    wait_for(lambda: all(Job.objects.get(pk=j.pk).status == "completed" for j in every), what="every job to end")
    charge(every)
    money = jobs_money([j.pk for j in every])
    figures = summary(campaign)
    by_run = {r["job_id"]: r for r in figures["runs"]}
    for run in (first, second):
        own = Decimal(money[run.pk]["cost_usd"])
        scoring = scorers[run.pk] + (scorers[None] if run == first else [])
        evaluation = sum(Decimal(money[e.pk]["cost_usd"]) for e in scoring)
        assert evaluation > 0 and Decimal(by_run[run.pk]["cost_usd"]) == own + evaluation
    assert Decimal(figures["cost_usd"]) == sum(Decimal(money[j.pk]["cost_usd"]) for j in every)
    assert campaign.spent_usd() == Decimal(figures["cost_usd"])
    assert by_run[second.pk]["own_gain_points"] == 40.0 and by_run[second.pk]["own_gain_from"] == "retention evals"
    assert by_run[first.pk]["own_gain_points"] == 40.0, "run 1's gain over the start"

    # The campaign page says where each run's dollars and gains come from.
    page = client.get(f"/campaigns/{campaign.pk}")
    assert page.status_code == 200
    html = " ".join(page.content.decode().split())
    scorer = scorers[first.pk][0].pk
    assert (f'to score it and its start (<a href="/jobs/{scorer}">#{scorer}</a>, '
            f'<a href="/jobs/{start_scorer.pk}">#{start_scorer.pk}</a>)') in html
    scorer = scorers[second.pk][0].pk
    assert f'to score it (<a href="/jobs/{scorer}">#{scorer}</a>)' in html
    assert "the score each environment's evaluation recipe (arith: score) logged for the model run 1 started from" in html
    assert "no starting policy" not in html and "being" not in html, "the start is scored, and said so once"


def test_the_campaigns_form_makes_a_loop_of_recipes_and_refuses_a_bad_one(db, recipe, operator, client):
    recipe("steps", STEPS, params=STEPS_PARAMS)
    recipe("steps-continue", [*STEPS, "--more", "--from", "{init_from}"], params=STEPS_PARAMS)
    recipe("score", [PY, "-c", EVAL, "{init_from}"], score_key="eval/pass1", evaluates=True)
    client.force_login(operator)
    form = client.get("/campaigns").content.decode()
    next_run, scored_by = form.split('name="continue_recipe"')[1].split('name="eval_recipe"')
    assert '<option value="steps">steps v1</option>' in form
    assert '<option value="steps-continue"' in next_run and '<option value="score"' not in next_run
    assert '<option value="score"' in scored_by and '<option value="steps-continue"' not in scored_by

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


def test_an_evaluation_recipe_is_refused_as_the_next_run_and_must_name_init_from(db, recipe, operator, client):
    from launch.models import Recipe
    from yardstick.inputs import InputError

    recipe("steps", STEPS, params=STEPS_PARAMS)
    recipe("score", [PY, "-c", EVAL, "{init_from}"], score_key="eval/pass1", evaluates=True)
    client.force_login(operator)
    resp = client.post("/api/campaigns", json.dumps({"name": "c", "team": "research", "envs": ["arith"],
                                                     "run_recipe": "steps", "continue_recipe": "score"}),
                       content_type="application/json")
    assert resp.status_code == 400 and resp.json()["field"] == "continue_recipe"
    assert "recipe 'score' is an evaluation recipe" in resp.json()["error"]
    assert not Campaign.objects.exists()
    with pytest.raises(InputError, match="its argv must name {init_from}") as refused:
        recipe("score-nothing", [PY, "-c", EVAL], evaluates=True)
    assert refused.value.field == "evaluates"
    with pytest.raises(InputError, match="evaluates must be true .* or false, got 'yes'"):
        recipe("score-yes", [PY, "-c", EVAL, "{init_from}"], evaluates="yes")
    assert "evaluates" not in Recipe.objects.get(name="steps").definition, "stored only when true"


def test_a_loop_without_an_evaluation_recipe_says_once_that_nothing_scores_it(db, recipe, operator, client):
    recipe("steps", STEPS, params=STEPS_PARAMS)
    recipe("steps-continue", [*STEPS, "--more", "--from", "{init_from}"], params=STEPS_PARAMS)
    recipe("score", [PY, "-c", EVAL, "{init_from}"], score_key="eval/pass1", evaluates=True)
    client.force_login(operator)
    pages = {}
    for name, scorers in (("unscored", {}), ("scored", {"arith": "score"})):
        resp = client.post("/api/campaigns", json.dumps({
            "name": name, "team": "research", "envs": ["arith"], "run_recipe": "steps",
            "continue_recipe": "steps-continue", "eval_recipes": scorers}), content_type="application/json")
        pages[name] = " ".join(client.get(f"/campaigns/{resp.json()['id']}").content.decode().split())
    unscored, scored = pages["unscored"], pages["scored"]
    assert unscored.count("No evaluation recipe scores this campaign's policy") == 1
    assert "Gains are each run's own score's" in unscored
    assert "being evaluated" not in unscored and "no starting policy is evaluated" not in unscored
    assert ("The starting policy (the model run 1 starts from) is scored by score once run 1 has run, on run 1's "
            "node.") in scored
    assert "being evaluated on the jobs queue" not in scored

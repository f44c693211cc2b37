"""/api/sweeps and the sweep pages on the real database: who may do what, every bad field refused by name with nothing
created, the first trials in the line, Stop, the budget (raised by admins only), Run again, the CSV, and the campaign
form a trial fills in. The trials wait in the line here: a launch worker has reported, none runs."""

import csv
import io
import json
from decimal import Decimal

import pytest

from launch.models import Recipe
from sweeps.models import State, Sweep
from trainer.models import Job, Status, Worker

GPUS = [{"index": i, "uuid": f"GPU-api-{i}", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559} for i in (0,)]
PARAMS = [{"name": "lr", "kind": "float", "default": 1e-3, "minimum": 1e-7, "maximum": 1.0},
          {"name": "kl_coef", "kind": "float", "default": 0.04, "minimum": 0.0, "maximum": 1.0},
          {"name": "steps", "kind": "integer", "default": 100, "minimum": 1, "maximum": 1000}]
GOOD = {"name": "lr hunt", "team": "research", "recipe": "train",
        "space": {"lr": {"low": 1e-5, "high": 1e-2, "log": True}, "kl_coef": {"low": 0.0, "high": 0.2}},
        "params": {"steps": 50}, "objective": "per_dollar", "budget_usd": "10", "parallel": 2, "max_trials": 5}


@pytest.fixture
def recipes(db, admin_user):
    Recipe.define("train", {"argv": ["python", "train.py", "--lr", "{lr}", "--kl", "{kl_coef}", "--steps", "{steps}"],
                            "params": PARAMS, "devices": {"kind": "cuda", "count": 1}, "score_key": "eval/pass1"},
                  admin_user)
    Recipe.define("more", {"argv": ["python", "train.py", "--from", "{init_from}"]}, admin_user)
    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu", "cuda:0"], cores=8, gpus=GPUS)


def post(client, url, body=None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


@pytest.mark.parametrize("change, field, says", [
    ({"space": {"lr": {"low": 1e-5, "high": 2.0}}}, "space.lr.high", "space.lr.high must be from 1e-07 to 1.0"),
    ({"space": {"kl_coef": {"low": 0.0, "high": 0.2, "log": True}}}, "space.kl_coef.low", "above 0 for a log scale"),
    ({"space": {"warmup": {"low": 0, "high": 1}}}, "space.warmup", "the recipe has no parameter 'warmup'"),
    ({"space": {}}, "space", "space must be an object naming at least one parameter"),
    ({"params": {"lr": 0.1}}, "params.lr", "params.lr is searched (space.lr): leave it out of params"),
    ({"params": {"steps": 0}}, "params.steps", "params.steps must be from 1 to 1000, got 0"),
    ({"objective": "fastest"}, "objective", "objective must be one of front: "),
    ({"objective": "cheapest"}, "target_score", "target_score is required"),
    ({"target_score": 50}, "target_score", "target_score is the cheapest objective's score to reach"),
    ({"budget_usd": None}, "budget_usd", "budget_usd is required"),
    ({"budget_usd": "0"}, "budget_usd", "above 0"),
    ({"budget_usd": "-3"}, "budget_usd", "budget_usd must be a number of dollars >= 0"),
    ({"parallel": 0}, "parallel", "parallel must be an integer from 1 to 64, got 0"),
    ({"max_trials": 2.5}, "max_trials", "max_trials must be an integer from 1 to 1000"),
    ({"stop_share": 1.5}, "stop_share", "stop_share must be a number from 0 to 0.99"),
    ({"recipe": "nope"}, "recipe", "there is no recipe 'nope'; recipes: "),
    ({"recipe": "more", "space": {}}, "recipe", "starts from another job's checkpoint"),
    ({"priority": "high"}, "priority", "priority high is for admins"),
    ({"team": ""}, "team", "team is required"),
    ({"colour": "red"}, "colour", "a sweep has no field 'colour'"),
    ({"parallel": "2"}, "parallel", "parallel must be a JSON number, got the string '2'"),
    ({"space": {"lr": {"low": "1e-5", "high": 1e-2}}}, "space.lr.low", "must be a JSON number, got the string '1e-5'"),
    ({"params": {"steps": "50"}}, "params.steps", "params.steps must be a JSON number (an integer), got the string"),
    ({"parallel": 3, "max_trials": 2}, "max_trials", "max_trials (2) is below parallel (3), the trials run at once"),
])
def test_a_bad_field_is_refused_by_name_and_nothing_is_created(recipes, operator, client, change, field, says):
    client.force_login(operator)
    resp = post(client, "/api/sweeps", {**GOOD, **change})
    assert resp.status_code == 400, resp.content
    assert resp.json()["field"] == field and says in resp.json()["error"], resp.json()
    assert not Sweep.objects.exists() and not Job.objects.exists()


def test_an_operator_runs_a_sweep_whose_first_trials_wait_in_the_line(recipes, operator, viewer, client):
    client.force_login(viewer)
    assert post(client, "/api/sweeps", GOOD).status_code == 403
    client.force_login(operator)
    resp = post(client, "/api/sweeps", GOOD)
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["state"] == "running" and body["figures"]["started"] == 2
    sweep = Sweep.objects.get(pk=body["id"])
    trials = list(sweep.trials.select_related("job__launch").order_by("number"))
    assert trials[0].params == {"lr": 1e-3, "kl_coef": 0.04}, "trial 0: the recipe's defaults"
    assert 1e-5 <= trials[1].params["lr"] <= 1e-2 and trials[1].params != trials[0].params
    for t in trials:
        assert t.job.status == Status.QUEUED and t.job.queued_at is not None and t.job.team == "research"
        assert t.job.launch.values == {"lr": t.params["lr"], "kl_coef": t.params["kl_coef"], "steps": 50}
        assert t.job.name == f"lr hunt · trial {t.number}"
    assert [t.job.placed_at is not None for t in trials] == [True, False], "one GPU: the second waits"
    sweep.advance()
    assert sweep.trials.count() == 2, "two at once: no third while both are active"
    listed = client.get("/api/sweeps").json()["sweeps"]
    assert [(s["id"], s["spent_usd"], s["trials"]) for s in listed] == [(sweep.pk, "0.00", 2)]


def test_stop_budget_and_run_again(recipes, operator, admin_user, client):
    client.force_login(operator)
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", GOOD).json()["id"])
    lowered = post(client, f"/api/sweeps/{sweep.pk}/budget", {"budget_usd": "4"})
    assert lowered.status_code == 200 and lowered.json()["budget_usd"] == "4.00"
    raised = post(client, f"/api/sweeps/{sweep.pk}/budget", {"budget_usd": "40"})
    assert raised.status_code == 400 and "only an admin can raise a sweep's budget" in raised.json()["error"]
    assert post(client, f"/api/sweeps/{sweep.pk}/budget", {"budget_usd": "x"}).json()["field"] == "budget_usd"
    client.force_login(admin_user)
    assert post(client, f"/api/sweeps/{sweep.pk}/budget", {"budget_usd": "40"}).json()["budget_usd"] == "40.00"
    client.force_login(operator)

    stopped = post(client, f"/api/sweeps/{sweep.pk}/stop")
    assert stopped.status_code == 200 and stopped.json()["state"] == "ended", "queued trials are cancelled at once"
    assert stopped.json()["reason"] == "stopped by otto"
    assert set(Job.objects.values_list("status", flat=True)) == {Status.STOPPED}
    why = "cancelled before it started by the sweep's Stop by otto"
    assert [r["stop_reason"] for r in client.get(f"/api/sweeps/{sweep.pk}").json()["figures"]["trials"]] == [why, why]
    assert f'<td class="trial-stop">{why}</td>' in client.get(f"/sweeps/{sweep.pk}").content.decode().replace("&#x27;", "'")
    again = post(client, f"/api/sweeps/{sweep.pk}/stop")
    assert again.status_code == 409 and again.json()["state"] == "ended"

    copy = post(client, f"/api/sweeps/{sweep.pk}/again")
    assert copy.status_code == 201
    new = Sweep.objects.get(pk=copy.json()["id"])
    sweep.refresh_from_db()
    assert (new.seed, new.name, new.space, new.budget_usd) == (1, "lr hunt (again)", sweep.space, sweep.budget_usd)
    assert new.state == State.RUNNING and new.trials.count() == 2
    assert client.get("/api/sweeps/999").status_code == 404


def test_a_sweep_ending_with_its_last_trials_running_can_stop_them(recipes, operator, client):
    client.force_login(operator)
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", {**GOOD, "max_trials": 2}).json()["id"])
    assert (sweep.state, sweep.reason) == (State.ENDING, "all 2 trials started")
    assert 'id="sweep-stop">■ Stop its last trials' in client.get(f"/sweeps/{sweep.pk}").content.decode()
    resp = post(client, f"/api/sweeps/{sweep.pk}/stop")
    assert resp.status_code == 200 and resp.json()["state"] == "ended"
    assert set(Job.objects.values_list("status", flat=True)) == {Status.STOPPED}


def test_the_csv_and_pages_show_each_trial_and_a_trial_fills_in_the_campaign_form(recipes, operator, client):
    client.force_login(operator)
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", GOOD).json()["id"])
    rows = list(csv.reader(io.StringIO(client.get(f"/api/sweeps/{sweep.pk}/csv").content.decode())))
    assert rows[0][:6] == ["trial", "job_id", "name", "status", "params", "cost_usd"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "TOTAL"] and rows[-1][5] == "0.00"
    assert json.loads(rows[1][4]) == {"kl_coef": 0.04, "lr": 0.001}
    page = client.get(f"/sweeps/{sweep.pk}").content.decode()
    assert 'id="trials-table"' in page and 'data-trial="0"' in page and 'data-trial="1"' in page
    assert "the most points per dollar" in page and 'id="sweep-stop"' in page
    assert "you can lower it; raising it is an admin" in page
    listing = client.get("/sweeps").content.decode()
    assert f'data-sweep="{sweep.pk}"' in listing and '<option value="train">' in listing
    assert '<option value="more">' not in listing, "a recipe that continues a job is no sweep's"
    filled = client.get("/campaigns", {"run_recipe": "train", "run_params": '{"lr": 0.001}', "team": "research",
                                       "name": "from trial 0"}).content.decode()
    assert '<details class="card start" id="new-campaign" open>' in filled
    assert '<option value="train" selected>train v1</option>' in filled and 'value="{&quot;lr&quot;: 0.001}"' in filled


def test_the_form_creates_a_sweep_or_says_what_was_wrong(recipes, operator, client):
    client.force_login(operator)
    form = {"name": "by form", "team": "research", "recipe": "train", "space": '{"kl_coef": {"low": 0, "high": 0.1, '
            '"log": true}}', "budget_usd": "5", "objective": "front"}
    resp = client.post("/sweeps/create", form, follow=True)
    assert "Sweep not created: space.kl_coef.low must be above 0 for a log scale" in resp.content.decode()
    resp = client.post("/sweeps/create", {**form, "space": "lr"}, follow=True)
    assert "Sweep not created: space must be a JSON object such as" in resp.content.decode()
    form["space"] = '{"lr": {"low": 1e-5, "high": 0.1, "log": true}}'
    resp = client.post("/sweeps/create", form)
    sweep = Sweep.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/sweeps/{sweep.pk}"
    assert (sweep.objective, sweep.parallel, sweep.max_trials, sweep.trials.count()) == ("front", 2, 20, 2)


def test_a_sweep_whose_first_trial_cannot_start_is_refused_saying_why(recipes, operator, client, admin_user):
    Recipe.define("on-ray", {"argv": ["python", "train.py", "--lr", "{lr}"], "params": PARAMS[:1], "executor": "ray",
                             "shared_dir": "/mnt/shared"}, admin_user)
    client.force_login(operator)
    resp = post(client, "/api/sweeps", {**GOOD, "recipe": "on-ray", "space": {"lr": {"low": 1e-5, "high": 1e-2}},
                                        "params": {}})
    assert resp.status_code == 400 and resp.json()["field"] == "cluster", resp.json()
    assert "this recipe runs on a ray cluster: choose one" in resp.json()["error"]
    assert not Sweep.objects.exists() and not Job.objects.exists()


def test_a_trial_that_ended_after_the_minutes_charged_so_far_is_not_judged_on_them_yet(recipes, operator, client):
    from datetime import timedelta

    from costs.models import AttributionState
    from sweeps.figures import summary

    client.force_login(operator)
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", GOOD).json()["id"])
    job = sweep.trials.get(number=0).job
    Step = job.steps.model
    Step.objects.create(job=job, step=0, eval_pass1=10.0, metrics={})
    Step.objects.create(job=job, step=5, eval_pass1=30.0, metrics={})
    assert job.claim()
    job.refresh_from_db()
    job.finish(Status.COMPLETED, "done")
    job.refresh_from_db()
    AttributionState.objects.update_or_create(pk=1, defaults={"done_through": job.finished_at - timedelta(minutes=1)})
    s = summary(sweep)
    row = s["trials"][0]
    assert row["settling"] and not row["on_front"] and s["best"]["score"] is None
    assert [f.told_state for f in sweep.figures()][:1] == ["running"], "told as running while its dollars settle"
    assert "still being charged" in client.get(f"/sweeps/{sweep.pk}").content.decode()
    AttributionState.objects.filter(pk=1).update(done_through=job.finished_at + timedelta(minutes=1))
    s = summary(sweep)
    assert not s["trials"][0]["settling"] and s["best"]["score"] == 0


def run_charged(job, steps, score=float):
    """The trial ran `steps` steps on gpu-a, one charged minute each (tests/sweeps/bill.py), scoring score(step) at
    each, and completed."""
    from tests.sweeps.bill import bill
    from trainer.models import Stint

    Stint.objects.create(job=job, node="gpu-a", device="cpu", pid=1)
    for k in range(steps + 1):
        job.steps.model.objects.create(job=job, step=k, eval_pass1=score(k), metrics={})
    assert job.claim()
    job.refresh_from_db()
    job.finish(Status.COMPLETED, "done")
    bill(job)


def test_the_best_per_dollar_says_its_gain_with_its_sign_and_when_no_trial_gained(recipes, operator, client):
    from costs.models import PriceEntry
    from tests.sweeps.bill import prices

    prices()
    client.force_login(operator)
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", {**GOOD, "parallel": 1}).json()["id"])
    run_charged(sweep.trials.get(number=0).job, 6, score=lambda k: 20.0 - k)
    page = client.get(f"/sweeps/{sweep.pk}").content.decode()
    card = page.split('id="best-per-dollar"')[1].split("Start a campaign")[0]
    assert "trial 0: -6.0 pts" in card and "(no trial gained: the least lost)" in card and "+-" not in card
    sweep.advance()
    run_charged(sweep.trials.get(number=1).job, 6)
    card = client.get(f"/sweeps/{sweep.pk}").content.decode().split('id="best-per-dollar"')[1].split("Start a")[0]
    assert "trial 1: +6.0 pts" in card and "no trial gained" not in card
    # Its dollars say what they rest on, as the job pages do: here, prices that are not real.
    assert 'id="sweep-flags"' not in client.get(f"/sweeps/{sweep.pk}").content.decode()
    PriceEntry.objects.update(is_example=True)
    flags = client.get(f"/sweeps/{sweep.pk}").content.decode().split('id="sweep-flags"')[1].split("</div>")[0]
    assert "$ example prices" in flags and "estimated" not in flags
    assert client.get(f"/api/sweeps/{sweep.pk}").json()["figures"]["example_price"] is True


def test_the_sweep_starts_no_trial_that_would_pass_its_budget_and_says_why(recipes, operator, client):
    from tests.sweeps.bill import MINUTE_USD, prices

    prices()
    client.force_login(operator)
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", {**GOOD, "budget_usd": "1", "parallel": 1}).json()["id"])
    run_charged(sweep.trials.get(number=0).job, 6)  # $0.3615
    sweep.advance()
    assert sweep.state == State.RUNNING and sweep.trials.count() == 2, "$0.3615 spent + one more at that: $0.723"
    run_charged(sweep.trials.get(number=1).job, 6)
    sweep.advance()
    # $0.723 spent; a third at the completed ones' mean would make $1.0845, past the $1 budget.
    assert sweep.trials.count() == 2 and (sweep.state, sweep.why) == (State.ENDED, "budget")
    assert sweep.reason == ("the next trial would pass the budget: a trial costs about $0.36 (the mean of 2 completed),"
                            " and $0.28 of $1.00 was left then, after what the running trials would spend")
    assert 2 * 6 * MINUTE_USD == Decimal("0.723")


def test_a_refused_sweep_form_comes_back_open_with_what_was_sent(recipes, operator, client, admin_user):
    Recipe.define("train-cpu", {"argv": ["python", "train.py", "--lr", "{lr}"], "params": PARAMS[:1],
                                "score_key": "eval/pass1"}, admin_user)
    client.force_login(operator)
    form = {"name": "cpu hunt", "team": "research", "recipe": "train-cpu", "space": '{"lr": {"low": 2, "high": 3}}',
            "budget_usd": "5", "objective": "front", "parallel": "3", "priority": "low"}
    resp = client.post("/sweeps/create", form)
    assert resp.status_code == 302 and resp["Location"].startswith("/sweeps?") and resp["Location"].endswith("#new-sweep")
    page = client.get(resp["Location"]).content.decode()
    assert "Sweep not created: space.lr.low must be from 1e-07 to 1.0" in page
    assert '<details class="card start" id="new-sweep" open>' in page
    assert '<option value="train-cpu" selected>' in page, "the recipe chosen, not the first one"
    assert '>{&quot;lr&quot;: {&quot;low&quot;: 2, &quot;high&quot;: 3}}</textarea>' in page
    assert 'name="parallel" min="1" max="64" value="3"' in page and '<option value="low" selected>' in page
    assert not Sweep.objects.exists()


def test_a_campaign_from_a_cpu_trial_of_the_shipped_recipes_takes_the_cpu_continuation(db, operator, admin_user,
                                                                                      client):
    import yaml

    from campaigns.models import Campaign
    from launch.models import import_all
    from tests.conftest import ROOT

    import_all(yaml.safe_load((ROOT / "launch" / "examples" / "recipes.yaml").read_text()), admin_user)
    Worker.report("launch@cpu-a", "cpu-a", ["launch@cpu-a"], ["cpu"], cores=4)
    client.force_login(operator)
    body = {"name": "cpu lr", "team": "research", "recipe": "builtin-grpo-cpu", "objective": "per_dollar",
            "space": {"lr": {"low": 1e-4, "high": 1e-3, "log": True}, "kl_coef": {"low": 0.0, "high": 0.1}},
            "params": {"steps": 8}, "budget_usd": "1", "parallel": 1, "max_trials": 2}
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", body).json()["id"])
    # Its shared setup (the base policy's build) first, once, for all trials: charged to the sweep.
    setup = sweep.setup_job
    assert setup.launch.recipe_name == "builtin-grpo-cpu-setup" and not sweep.trials.exists()
    assert setup.claim() and setup.finish(Status.COMPLETED)
    sweep.advance()
    link = client.get(f"/sweeps/{sweep.pk}").context["campaign_links"][0]  # "campaign from it", once it has ended
    assert "continue_recipe=builtin-grpo-cpu-continue" in link
    row = {"number": 0, "params": sweep.trials.get(number=0).params}
    filled = client.get(link.split("#")[0]).content.decode()
    select = filled.split('name="continue_recipe"')[1].split("</select>")[0]
    assert 'value="builtin-grpo-cpu-continue" selected' in select
    assert "trl-grpo-continue" not in select and "builtin-grpo-continue" not in select, (
        "only the recipes that take the trial's values on its kind of device")
    form = {"name": "from trial 0", "team": "research", "envs": "arithmetic", "run_recipe": "builtin-grpo-cpu",
            "continue_recipe": "builtin-grpo-cpu-continue", "run_params": json.dumps({"steps": 8, **row["params"]})}
    resp = client.post("/campaigns/create", {**form, "budget_usd": "-1"})
    again = client.get(resp["Location"]).content.decode()
    assert "Campaign not created: budget_usd must be a number of dollars" in again
    assert '<details class="card start" id="new-campaign" open>' in again
    assert 'value="builtin-grpo-cpu-continue" selected' in again and 'value="from trial 0"' in again
    resp = client.post("/campaigns/create", form)
    campaign = Campaign.objects.get()
    assert resp["Location"] == f"/campaigns/{campaign.pk}"
    assert (campaign.run_recipe, campaign.continue_recipe, campaign.run_params) == (
        "builtin-grpo-cpu", "builtin-grpo-cpu-continue", {"steps": 8, **row["params"]})


def test_amounts_side_by_side_are_written_to_one_precision():
    from costs.money import usd_texts

    # The walk's sweep: $0.016912 spent of $0.02, shown "$0.02 · $0.02 · $0.0031 left".
    assert usd_texts(Decimal("0.016912"), Decimal("0.02"), Decimal("0.003088")) == ["$0.0169", "$0.0200", "$0.0031"]
    assert usd_texts(Decimal("12.5"), Decimal("100"), Decimal("87.5")) == ["$12.50", "$100.00", "$87.50"]
    assert usd_texts(Decimal("0.0201"), Decimal("0.02"), Decimal("-0.0001")) == ["$0.0201", "$0.0200", "-$0.0001"]
    assert usd_texts(None, Decimal("1234.5")) == ["—", "$1,234.50"]


def test_an_interrupted_trial_waits_for_a_launch_worker_and_no_trial_starts_from_a_process_going_away(
        recipes, operator, client):
    """A restart under way: the launch worker has stopped its trials (interrupted) and forgotten itself. A pass then
    (from the worker still running the sweeps' passes) runs nothing again and does not end the sweep on the refusal:
    the trial goes on at the pass after a launch worker has reported. A pass in a process that is shutting down
    starts no trial at all (it would go to a worker going away)."""
    from yardstick import celery as yardstick_celery

    client.force_login(operator)
    sweep = Sweep.objects.get(pk=post(client, "/api/sweeps", {**GOOD, "parallel": 1}).json()["id"])
    first = sweep.trials.get().job
    assert first.claim()
    Job.objects.filter(pk=first.pk).update(status=Status.STOPPED, interrupted_by="worker shutting down (Warm)")
    Worker.objects.filter(name="launch@gpu-a").delete()  # forgotten on its way out
    sweep.advance()
    sweep.refresh_from_db()
    assert (sweep.state, sweep.reason, sweep.trials.count()) == (State.RUNNING, "", 1), "it waits"

    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu", "cuda:0"], cores=8, gpus=GPUS)
    yardstick_celery.start_no_more_work()
    try:
        sweep.advance()
        assert sweep.trials.count() == 1, "nothing started from a process going away"
    finally:
        yardstick_celery._shutting_down.clear()
    sweep.advance()  # up again: trial 0's parameters run again as trial 1
    again = sweep.trials.get(number=1)
    assert (sweep.state, sweep.trials.get(number=0).run_again_as_id) == (State.RUNNING, again.pk)
    assert again.params == sweep.trials.get(number=0).params

"""A sweep end to end on a real launch worker: its trials are launched jobs of a script whose score is a known
function of its parameters and of its dollars (tests/sweeps/surface_script.py, charged a known price per step by
tests/sweeps/bill.py), through the line; a trial whose score at its dollars is below most earlier trials' is
stopped by the sweep, saying so; the sweep's dollars are its trials', to the micro-dollar (the budget's stops:
tests/sweeps/test_sweep_api.py and test_sweep_browser.py); a pass in a fresh process goes on where the last left off, repeating no trial."""

import json
import os
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from costs.intelligence import jobs_money
from costs.money import exact_usd, usd_text
from sweeps import search
from sweeps.figures import summary
from sweeps.models import State, Sweep
from tests.conftest import database_url
from tests.sweeps.bill import MINUTE_USD, prices
from tests.sweeps.driving import drive
from tests.waiting import wait_for
from trainer.models import Job, Status

pytestmark = pytest.mark.slow
PY = sys.executable
SCRIPT = str(Path(__file__).with_name("surface_script.py"))
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
import surface_script  # noqa: E402

PARAMS = [{"name": "x", "kind": "float", "default": 0.5, "minimum": 0.0, "maximum": 1.0, "help": "where on the hill"},
          {"name": "steps", "kind": "integer", "default": 6, "minimum": 1, "maximum": 40, "help": "steps"},
          {"name": "gate", "kind": "string", "default": "", "help": "the test's gate folder"},
          {"name": "seed", "kind": "integer", "default": 0, "minimum": 0, "maximum": 1000, "help": "the score's noise"}]


@pytest.fixture
def surface(recipe, launch_worker, tmp_path):
    """The surface script as an admin's recipe; its stop flag read every second (stop graces of 3 s and 2 s)."""
    recipe("surface", [PY, SCRIPT, "--x", "{x}", "--steps", "{steps}", "--gate", "{gate}", "--seed", "{seed}"],
           params=PARAMS, score_key="score", stop_grace_s=[3, 2])
    prices()
    gate = tmp_path / "gate"
    gate.mkdir()
    return gate


def test_a_sweep_stops_a_hopeless_trial_by_the_dollar_and_counts_its_dollars(
        surface, operator, client):
    client.force_login(operator)
    body = {"name": "hill", "team": "research", "recipe": "surface", "space": {"x": {"low": 0.0, "high": 1.0}},
            "params": {"steps": 6, "gate": str(surface)}, "objective": "per_dollar", "budget_usd": "2.0",
            "parallel": 3, "max_trials": 5, "seed": 3, "stop_min_trials": 2}
    resp = client.post("/api/sweeps", json.dumps(body), content_type="application/json")
    assert resp.status_code == 201, resp.content
    sweep = Sweep.objects.get(pk=resp.json()["id"])
    first = list(sweep.trials.order_by("number"))
    assert [t.params for t in first[:1]] == [{"x": 0.5}], "trial 0 runs the recipe's defaults"
    assert len(first) == 3 and all(t.job.queued_at for t in first), "three at once, each through the line"

    drive(sweep, surface, lambda s: s.state == State.ENDED, timeout_s=120, in_order=True)
    trials = list(sweep.trials.select_related("job").order_by("number"))
    by_sweep = [t for t in trials if t.stopped_reason and t.job.status == Status.STOPPED]
    assert by_sweep, [(t.number, t.params, t.job.status) for t in trials]
    stopped = by_sweep[0]
    assert stopped.job.status == Status.STOPPED and stopped.job.stop_reason == stopped.stopped_reason
    assert stopped.stopped_reason.startswith("stopped by the sweep: ") and " earlier trials had " in stopped.stopped_reason
    # It was judged at its first gate (step 3 of 6): it spent 3 minutes, not 6.
    money = jobs_money([t.job_id for t in trials])
    assert Decimal(money[stopped.job_id]["cost_usd"]) == 3 * MINUTE_USD
    # What it had reached there was below more than half of the earlier trials' scores at those dollars.
    q = surface_script.score(stopped.params["x"], 3)
    earlier = [t for t in trials if t.number < stopped.number and t.job.status == Status.COMPLETED]
    better = [t for t in earlier if surface_script.score(t.params["x"], 3) > q]
    assert len(better) > len(earlier) / 2

    # The sweep's dollars are its trials', to the micro-dollar, the stopped one's included.
    s = summary(sweep)
    assert Decimal(s["spent_usd"]) == sum((Decimal(money[t.job_id]["cost_usd"]) for t in trials), Decimal(0))
    for t in trials:
        charged = Decimal(money[t.job_id]["cost_usd"])
        assert charged in (3 * MINUTE_USD, 6 * MINUTE_USD), (t.number, charged)
    # Its five trials fitted the budget (each running one counted at the completed ones' mean): it ended at five.
    assert (sweep.why, sweep.reason) == ("trials", "all 5 trials started")
    assert Decimal(s["spent_usd"]) <= Decimal("2.0") + 6 * MINUTE_USD
    # The New sweep form's estimate of a trial before a budget is set: the recipe's completed jobs' mean (the
    # stopped trial is not one).
    completed = [t for t in trials if t.job.status == Status.COMPLETED]
    estimate = json.loads(client.get("/sweeps").context["recipe_costs"])["surface"]
    full = exact_usd(6 * MINUTE_USD)
    assert estimate == {"mean_usd": full, "low_usd": full, "high_usd": full, "jobs": len(completed)}
    listed = client.get("/api/sweeps").json()["sweeps"]
    assert [(x["id"], x["spent_usd"], x["trials"]) for x in listed] == [(sweep.pk, s["spent_usd"], len(trials))]
    assert usd_text(Decimal(s["spent_usd"])) in client.get("/sweeps").content.decode()
    # The cost review: one line for the sweep, its trials underneath, the same dollars.
    day = timezone.now().date()
    review = client.get("/costs", {"from": (day - timedelta(days=1)).isoformat(), "to": day.isoformat()})
    line = review.content.decode().split(f'<tbody data-sweep="{sweep.pk}">')[1].split("</tbody>")[0]
    assert usd_text(Decimal(s["spent_usd"])) in line.split('class="num sweep-spend">')[1].split("</td>")[0]
    assert line.count('class="sweep-trial"') == len(trials) and "by the sweep" in line
    # The search found better parameters than the recipe's defaults, on a surface known in advance (a sweep of real
    # training asserts no such thing: docs/development.md, "Claims about learning"). Trial 1, x 0.17, a start-up draw
    # of the seeded sampler (the same on every machine), ran its 6 steps to 96.5 × (1 − 0.8⁶) points for the same
    # dollars as the defaults' 92 × (1 − 0.8⁶) (x 0.5): 4.9 % more points per dollar.
    defaults = s["trials"][0]
    trial_1 = s["trials"][1]
    assert trial_1["status"] == Status.COMPLETED and trial_1["params"] == {"x": pytest.approx(0.16835, abs=1e-5)}
    assert float(trial_1["points_per_usd"]) > 1.04 * float(defaults["points_per_usd"]), s["trials"]
    best = next(r for r in s["trials"] if r["number"] == s["best"]["per_dollar"])
    assert best["number"] != 0 and float(best["points_per_usd"]) >= float(trial_1["points_per_usd"]), s["trials"]


def process_env(settings, tmp_path):
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "yardstick.settings", "DATABASE_URL": database_url(),
            "REDIS_URL": settings.REDIS_URL, "SECRET_KEY": settings.SECRET_KEY,
            "YARDSTICK_DATA_DIR": str(tmp_path / "fresh")}


def test_the_front_drawn_is_the_known_front_and_a_fresh_process_goes_on_without_repeating_a_trial(
        surface, operator, client, settings, tmp_path):
    client.force_login(operator)
    body = {"name": "front", "team": "research", "recipe": "surface",
            "space": {"x": {"low": 0.0, "high": 1.0}, "steps": {"low": 1, "high": 8}},
            "params": {"gate": str(surface)}, "objective": "front", "budget_usd": "100", "parallel": 3,
            "max_trials": 6, "seed": 11, "stop_share": 0}
    sweep = Sweep.objects.get(pk=client.post("/api/sweeps", json.dumps(body), content_type="application/json")
                              .json()["id"])
    drive(sweep, surface, lambda s: s.trials.count() >= 4)
    seen = {t.number: (t.job_id, t.params) for t in sweep.trials.all()}
    # Beat's pass in a process of its own, as after a restart of the control plane: what the sweep knows is in its
    # rows. It changes no trial there was, and a trial it starts (where one had ended meanwhile) is the next number.
    for _ in range(2):
        done = subprocess.run([PY, "-c", "import django; django.setup(); from sweeps.models import advance_all; "
                                         "print(advance_all())"], cwd=ROOT, env=process_env(settings, tmp_path),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    now = {t.number: (t.job_id, t.params) for t in sweep.trials.all()}
    assert {n: now[n] for n in seen} == seen and sorted(now) == list(range(len(now)))
    drive(sweep, surface, lambda s: s.state == State.ENDED)
    trials = list(sweep.trials.select_related("job").order_by("number"))
    assert [t.number for t in trials] == list(range(6)) and len({json.dumps(t.params) for t in trials}) == 6
    s = summary(sweep)
    known = [(surface_script.score(t.params["x"], t.params["steps"]), float(t.params["steps"] * MINUTE_USD))
             for t in trials]
    assert sorted(s["front"]) == sorted(trials[i].number for i in search.front(known))
    for r, (score, usd) in zip(s["trials"], known):
        assert r["score"] == pytest.approx(score) and Decimal(r["cost_usd"]) == Decimal(str(usd)).quantize(
            Decimal("0.000001"))


def test_a_restart_mid_sweep_starts_nothing_on_the_way_down_and_runs_the_interrupted_trials_again(
        surface, operator, client, settings):
    """`up` stopped (Ctrl-C) with two trials running: the worker shutting down stops them and, though their ends
    free devices, starts no trial in their place (it would go to a worker going away). After the restart the sweep's
    pass runs their parameters again (the surface script keeps no checkpoint to resume from); the interrupted trials
    are never a result: not on the front, not best, told to the search as failed, and counted once in max_trials."""
    from celery.signals import worker_shutting_down

    from sweeps.models import SweepTrial
    from yardstick import celery as yardstick_celery

    client.force_login(operator)
    body = {"name": "restart", "team": "research", "recipe": "surface", "space": {"x": {"low": 0.0, "high": 1.0}},
            "params": {"steps": 4, "gate": str(surface)}, "objective": "per_dollar", "budget_usd": "100",
            "parallel": 2, "max_trials": 3, "seed": 5, "stop_share": 0}
    resp = client.post("/api/sweeps", json.dumps(body), content_type="application/json")
    assert resp.status_code == 201, resp.content
    sweep = Sweep.objects.get(pk=resp.json()["id"])
    first = list(sweep.trials.select_related("job").order_by("number"))
    wait_for(lambda: all(t.job.output_lines.filter(text="waiting at step 2").exists() for t in first),
             what="both trials at their first gate")
    try:
        worker_shutting_down.send(sender=f"launch@{settings.YARDSTICK_NODE}", sig="SIGINT", how="Warm", exitcode=0)
        wait_for(lambda: set(Job.objects.filter(pk__in=[t.job_id for t in first]).values_list("status", flat=True))
                 == {Status.STOPPED}, what="both trials to stop")
        assert sweep.trials.count() == 2, "no trial started on the way down"
        assert all(Job.objects.get(pk=t.job_id).interrupted_by.startswith("worker shutting down") for t in first)
    finally:
        yardstick_celery._shutting_down.clear()  # the restarted processes

    sweep.advance()  # the first pass after the restart (beat's, or a trial's end)
    again = {t.run_again_of.number: t for t in SweepTrial.objects.filter(sweep=sweep, run_again_of__isnull=False)}
    assert sorted(again) == [0, 1] and [again[t.number].params for t in first] == [t.params for t in first]
    assert sorted(t.number for t in again.values()) == [2, 3]
    told = {f.trial.number: f.told.state for f in sweep.figures()}
    assert told[0] == told[1] == "failed"
    drive(sweep, surface, lambda s: s.state == State.ENDED)
    s = summary(sweep)
    assert [r["number"] for r in s["trials"]] == [0, 1, 2, 3, 4]
    assert (sweep.why, sweep.reason) == ("trials", "all 3 trials started"), "a trial run again counts once"
    assert not {0, 1} & set(s["front"]) and s["best"]["per_dollar"] not in (0, 1), s
    assert {r["number"]: r["status"] for r in s["trials"]} == {0: "stopped", 1: "stopped", 2: "completed",
                                                                3: "completed", 4: "completed"}
    why = Job.objects.get(pk=first[0].job_id).interrupted_by
    assert s["trials"][0]["stop_reason"] == f"interrupted: {why}; its parameters run again as trial {again[0].number}"
    assert f"interrupted: {why}" in client.get(f"/sweeps/{sweep.pk}").content.decode()


def test_a_recipes_shared_setup_runs_once_first_and_is_charged_to_the_sweep_not_to_a_trial(
        surface, operator, client, admin_user):
    """A base build that trials 0 and 1 each paid at once (and that made the defaults lose) runs once, as the
    sweep's setup job, before any trial: its dollars are the sweep's, no trial's, and the next trial's estimated cost
    is the trials' own."""
    from launch.models import Recipe
    from tests.sweeps.bill import bill

    Recipe.define("surface-setup", {"argv": [PY, SCRIPT, "--x", "0.5", "--steps", "2"], "score_key": "score"},
                  admin_user)
    recipe = Recipe.objects.get(name="surface")
    Recipe.define("surface", {**recipe.definition, "setup": "surface-setup"}, admin_user)
    client.force_login(operator)
    body = {"name": "set up", "team": "research", "recipe": "surface", "space": {"x": {"low": 0.0, "high": 1.0}},
            "params": {"steps": 2, "gate": str(surface)}, "objective": "per_dollar", "budget_usd": "0.5",
            "parallel": 1, "max_trials": 5, "seed": 2, "stop_share": 0}
    resp = client.post("/api/sweeps", json.dumps(body), content_type="application/json")
    assert resp.status_code == 201, resp.content
    sweep = Sweep.objects.get(pk=resp.json()["id"])
    setup = sweep.setup_job
    assert setup is not None and sweep.trials.count() == 0, "no trial before its setup"
    assert "its shared setup (job #%d) runs first" % setup.pk in client.get(f"/sweeps/{sweep.pk}").content.decode()
    wait_for(lambda: Job.objects.get(pk=setup.pk).status == Status.COMPLETED, what="the setup to complete")
    assert bill(Job.objects.get(pk=setup.pk)) == 2  # two minutes of device time, as the trials' two steps
    wait_for(lambda: sweep.trials.count() == 1, what="the first trial, once the setup completed")
    drive(sweep, surface, lambda s: s.state == State.ENDED, in_order=True)
    trial = 2 * MINUTE_USD
    s = summary(sweep)
    assert s["setup"]["job_id"] == setup.pk and Decimal(s["setup"]["cost_usd"]) == trial
    assert [Decimal(r["cost_usd"]) for r in s["trials"]] == [trial] * 3, "no trial pays for the setup"
    assert Decimal(s["spent_usd"]) == 4 * trial, "the sweep's dollars: its trials' and its setup's"
    assert sweep.why == "budget" and f"a trial costs about {usd_text(trial)} (the mean of 3 completed)" in sweep.reason
    rows = client.get(f"/api/sweeps/{sweep.pk}/csv").content.decode().splitlines()
    assert rows[-2].startswith(f"SETUP,{setup.pk},surface-setup,completed,,{s['setup']['cost_usd']},")


def test_more_trials_narrowed_around_the_best_then_the_best_over_seeds_with_their_spread(
        surface, operator, admin_user, client):
    """An ended sweep gets more trials of the same study: refused input changes nothing; "narrow around the best"
    narrows the space around that trial and its new trials are drawn inside it; "re-run the top 1 over 3 seeds" runs
    its parameters again with the recipe's seeds 1 and 2, and the Seeds table's spread is the runs' own figures."""
    client.force_login(operator)
    body = {"name": "more", "team": "research", "recipe": "surface", "space": {"x": {"low": 0.0, "high": 1.0}},
            "params": {"steps": 2, "gate": str(surface)}, "objective": "per_dollar", "budget_usd": "100",
            "parallel": 3, "max_trials": 3, "seed": 4, "stop_share": 0}
    sweep = Sweep.objects.get(pk=client.post("/api/sweeps", json.dumps(body), content_type="application/json")
                              .json()["id"])
    drive(sweep, surface, lambda s: s.state == State.ENDED)
    best = summary(sweep)["best"]["per_dollar"]
    bx = sweep.trials.get(number=best).params["x"]

    def more(what, path="more"):
        return client.post(f"/api/sweeps/{sweep.pk}/{path}", json.dumps(what), content_type="application/json")

    refused = [({"trials": "2"}, "trials"), ({"trials": 0}, "trials"),
               ({"trials": 2, "narrow_around": 9}, "narrow_around"),
               ({"trials": 2, "space": {"steps": {"low": 1, "high": 3}}}, "space"),
               ({"trials": 2, "narrow_around": 0, "space": {"x": {"low": 0.1, "high": 0.2}}}, "space"),
               ({"trials": 2, "budget_usd": "1000"}, "budget_usd"), ({"trials": 2, "colour": 1}, "colour"),
               ({"top": 1, "seeds": 1}, "seeds")]
    for what, field in refused:
        resp = more(what, "repeat" if "top" in what else "more")
        assert resp.status_code == 400 and resp.json()["field"] == field, (what, resp.content)
    assert client.post(f"/api/sweeps/{sweep.pk}/budget", json.dumps({"budget_usd": "0.000001"}),
                       content_type="application/json").status_code == 200
    resp = more({"trials": 2})
    assert resp.status_code == 400 and resp.json()["field"] == "budget_usd" and "has spent" in resp.json()["error"]
    sweep.refresh_from_db()
    assert (sweep.state, sweep.max_trials, sweep.space_changes, sweep.trials.count()) == (State.ENDED, 3, [], 3)

    # An admin gives the budget back with the narrowing.
    client.force_login(admin_user)
    resp = more({"trials": 2, "narrow_around": best, "budget_usd": "100"})
    assert resp.status_code == 200, resp.content
    sweep.refresh_from_db()
    # Running again: both new trials started at once (parallel 3), so it launches no more, as after any max_trials.
    assert (sweep.state, sweep.reason, sweep.max_trials) == (State.ENDING, "all 5 trials started", 5)
    (x,) = sweep.dimensions
    assert x.high - x.low == pytest.approx(0.25) and x.low <= bx <= x.high
    drive(sweep, surface, lambda s: s.state == State.ENDED)
    new = list(sweep.trials.filter(number__gte=3).order_by("number"))
    assert [t.number for t in new] == [3, 4] and all(x.low <= t.params["x"] <= x.high for t in new)
    s = summary(sweep)
    assert s["space_changes"][0]["around"] == best and s["space_changes"][0]["from_trial"] == 3
    outside = [t.number for t in sweep.trials.all() if not x.low <= t.params["x"] <= x.high]
    assert s["outside_space"] == sorted(outside)
    page = client.get(f"/sweeps/{sweep.pk}").content.decode()
    assert f"narrowed around trial {best} by {admin_user.username}" in page and 'id="more-form"' in page

    # The best (of the trials that are not repeats) over three seeds: its own (0) and the next two.
    top = summary(sweep)["best"]["per_dollar"]
    resp = more({"top": 1, "seeds": 3}, "repeat")
    assert resp.status_code == 200 and resp.json()["queued"] == 2, resp.content
    drive(sweep, surface, lambda s: s.state == State.ENDED)
    repeats = list(sweep.trials.filter(repeat_of__number=top).order_by("number"))
    assert [(t.number, t.seed, t.params) for t in repeats] == [
        (5, 1, sweep.trials.get(number=top).params), (6, 2, sweep.trials.get(number=top).params)]
    assert [Job.objects.get(pk=t.job_id).launch.values["seed"] for t in repeats] == [1, 2]
    s = summary(sweep)
    (group,) = s["repeats"]
    usd = float(2 * MINUTE_USD)
    tx = sweep.trials.get(number=top).params["x"]
    ppd = [surface_script.score(tx, 2, seed) / usd for seed in (0, 1, 2)]  # gain: the last score minus 0
    assert group["trials"] == [top, 5, 6] and group["ended"] == 3
    spread = group["points_per_usd"]
    assert (spread["low"], spread["high"]) == (pytest.approx(min(ppd)), pytest.approx(max(ppd)))
    assert spread["mean"] == pytest.approx(sum(ppd) / 3)
    assert more({"top": 1, "seeds": 3}, "repeat").json()["field"] == "seeds", "already over 3 seeds"
    page = client.get(f"/sweeps/{sweep.pk}").content.decode()
    assert 'id="seeds-table"' in page and f"trial {top}, seed 2" in page
    rows = client.get(f"/api/sweeps/{sweep.pk}/csv").content.decode().splitlines()
    assert rows[0].endswith(",repeat_of,seed") and rows[7].endswith(f",{top},2"), rows

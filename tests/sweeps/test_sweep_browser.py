"""A sweep in Chromium, on a real launch worker with Daphne serving the pages and their socket: an operator starts a
sweep from the New sweep form (a bad space first, refused naming the field), reads its page as its trials run and
end (rows, charts and spend redrawn without a reload), is refused raising the budget, lowers it below what was spent
(the running trial is stopped, no trial starts), runs it again and stops the new one; the cost review shows the first
as one line with its trials underneath."""

import json
import sys
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from sweeps.figures import summary
from sweeps.models import Sweep
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import in_thread, log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.sweeps.bill import prices
from tests.sweeps.driving import drive
from tests.sweeps.test_sweep_run import PARAMS, SCRIPT
from tests.waiting import wait_for

PY = sys.executable
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_operator_starts_follows_and_stops_a_sweep_in_the_browser(  # noqa: F811
        launch_worker, recipe, live_web, page, django_user_model, tmp_path, output_dir, request):
    recipe("surface", [PY, SCRIPT, "--x", "{x}", "--steps", "{steps}", "--gate", "{gate}"], params=PARAMS,
           score_key="score", stop_grace_s=[3, 2])
    in_thread(prices)
    gate = tmp_path / "gate"
    gate.mkdir()
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    record_events(page)
    log_in(page, live_web.url, "olga", "/sweeps")
    assert page.locator("#new-sweep").get_attribute("open") is not None, "no sweep yet: the form is open"
    assert "x (float 0 to 1, default 0.5)" in page.locator("#recipe-params-hint").inner_text()
    assert page.locator("#trial-cost-hint").inner_text().startswith("No completed job of this recipe yet")

    def fill_in(space):
        page.fill("#sweep-form input[name=name]", "hill")
        page.fill("#sweep-form input[name=team]", "research")
        page.fill("#sweep-form textarea[name=space]", space)
        page.fill("#sweep-form input[name=params]", f'{{"steps": 4, "gate": "{gate}"}}')
        page.select_option("#sweep-form select[name=objective]", "per_dollar")
        page.fill("#sweep-form input[name=budget_usd]", "2")
        page.fill("#sweep-form input[name=parallel]", "1")
        page.fill("#sweep-form input[name=max_trials]", "3")
        page.click("#sweep-form button[type=submit]")

    fill_in('{"x": {"low": 0, "high": 2}}')
    assert "Sweep not created: space.x.high must be from 0.0 to 1.0, got 2.0." in page.locator(".messages").inner_text()
    # The refused form is back, open, as it was sent.
    assert page.input_value("#sweep-form textarea[name=space]") == '{"x": {"low": 0, "high": 2}}'
    assert page.input_value("#sweep-form select[name=objective]") == "per_dollar"
    fill_in('{"x": {"low": 0, "high": 1}}')
    page.wait_for_url(f"{live_web.url}/sweeps/*")
    sweep = Sweep.objects.get()
    assert page.locator('#trials-table tr[data-trial="0"]').count() == 1
    wait_subscribed(page)

    drive(sweep, gate, lambda s: s.trials.count() >= 2 and s.trials.get(number=0).job.status == "completed",
          call=in_thread, serve=lambda number: number == 0)
    # The page follows without a reload: trial 0 ended with its dollars, trial 1 started.
    page.wait_for_selector('#trials-table tr[data-trial="1"]', timeout=30_000)
    page.wait_for_function("document.querySelector('#trials-table tr[data-trial=\"0\"] .trial-cost')"
                           ".textContent.trim() === '$0.24'")
    assert page.locator('[data-fig="front"]').get_attribute("data-drawn") == "true"
    assert page.locator("#sweep-spent").inner_text() == "$0.24"
    # Each trial's line on the score chart is named where it ends.
    assert page.locator('[data-fig="front"] .textpoint text', has_text="trial 0").count() == 1
    shot(page, output_dir, request, "running")

    page.fill("#budget-form input[name=budget_usd]", "9")
    page.click("#budget-form button")
    assert "only an admin can raise a sweep's budget" in page.locator(".messages").inner_text()
    # Lowered below what it spent: no more trials, and the running one is stopped.
    page.fill("#budget-form input[name=budget_usd]", "0.1")
    page.click("#budget-form button")
    assert f"Sweep {sweep.pk}'s budget is now $0.1." in page.locator(".messages").inner_text()
    assert "no more trials: the budget $0.10 is spent ($0.24 charged to its trials)" in page.locator(
        "#sweep-reason").inner_text()
    page.wait_for_selector('#sweep-state[data-state="ended"]', timeout=30_000)
    # Spent, Budget and what is left, side by side, to one precision.
    assert [page.locator(f"#sweep-{k}").inner_text() for k in ("spent", "budget", "left")] == [
        "$0.24", "$0.10", "-$0.14 left"]
    second = sweep.trials.get(number=1).job
    second.refresh_from_db()
    assert (second.status, second.stop_reason) == ("stopped", "the sweep's budget $0.10 is spent")
    assert sweep.trials.count() == 2, "no trial started once the budget was spent"
    assert "the sweep's budget $0.10 is spent" in page.locator('#trials-table tr[data-trial="1"] .trial-stop').inner_text()
    # More trials of an ended sweep whose budget is spent: refused, saying so, each form as it was sent.
    page.fill("#more-form input[name=trials]", "3")
    page.check('#more-form input[name=how][value="narrow"]')
    page.click("#more-submit")
    assert ("No trials added: the sweep has spent $0.24 of its $0.10 budget: give a higher budget with the 3 trial(s)"
            in page.locator(".messages").inner_text())
    assert page.input_value("#more-form input[name=trials]") == "3"
    assert page.is_checked('#more-form input[name=how][value="narrow"]')
    page.fill("#repeat-form input[name=seeds]", "4")
    page.click("#repeat-submit")
    assert "Nothing re-run: the sweep has spent $0.24" in page.locator(".messages").inner_text()
    assert page.input_value("#repeat-form input[name=seeds]") == "4"
    assert sweep.trials.count() == 2 and Sweep.objects.get(pk=sweep.pk).max_trials == 3, "nothing changed"

    # Run again: the New sweep form, filled in with this sweep and the next seed, spends nothing until it is sent;
    # then a new sweep, stopped from its own page.
    page.click("#sweep-again")
    page.wait_for_selector("#new-sweep[open] #sweep-form")
    assert Sweep.objects.count() == 1, "nothing started before the form is sent"
    assert page.input_value('#sweep-form [name="seed"]') == "1"
    assert page.input_value('#sweep-form [name="budget_usd"]') == "0.10"
    assert page.input_value('#sweep-form [name="name"]') == f"{sweep.name} (again)"
    assert page.input_value('#sweep-form [name="stop_min_trials"]') == str(sweep.stop_min_trials), "carried, hidden"
    page.click('#sweep-form button[type="submit"]')
    page.wait_for_url(f"{live_web.url}/sweeps/*")
    again = Sweep.objects.exclude(pk=sweep.pk).get()
    assert page.url.endswith(f"/sweeps/{again.pk}") and (again.seed, again.budget_usd) == (1, Decimal("0.1"))
    assert (again.space, again.params, again.stop_min_trials, again.stop_share) == (
        sweep.space, sweep.params, sweep.stop_min_trials, sweep.stop_share)
    page.click("#sweep-stop")
    page.wait_for_selector('#sweep-state[data-state="ending"], #sweep-state[data-state="ended"]')
    assert "no more trials: stopped by olga" in page.locator("#sweep-reason").inner_text()
    wait_for(lambda: all(t.job.status in ("stopped", "completed") for t in again.trials.select_related("job")),
             what="the stopped sweep's trial to end")
    # One more trial of the stopped sweep, within its budget: it runs again, and is stopped again.
    page.goto(f"{live_web.url}/sweeps/{again.pk}")
    page.fill("#more-form input[name=trials]", "1")
    page.click("#more-submit")
    assert (f"Sweep {again.pk}: 1 more trial(s) added by olga; 2 trials in all now."
            in page.locator(".messages").inner_text())
    assert again.trials.count() == 2
    page.click("#sweep-stop")
    wait_for(lambda: Sweep.objects.get(pk=again.pk).state == "ended", what="the sweep to end after its added trial")

    day = timezone.now().date()
    page.goto(f"{live_web.url}/costs?from={day - timedelta(days=1)}&to={day}")
    line = page.locator(f'#sweeps-review-table tbody[data-sweep="{sweep.pk}"]')
    assert line.locator(".sweep-spend").inner_text() == in_thread(lambda: summary(sweep)["spent_display"])
    assert line.locator(".sweep-trial").count() == 1, "trial 1 was stopped before anything was charged to it"
    shot(page, output_dir, request, "cost-review")

    # A trial's job names its sweep and trial, in the jobs list and on its page; either badge leads to the sweep.
    first = sweep.trials.get(number=0).job
    for where, badge in ((f"/jobs/{first.pk}", ".page-head .badge.sweep"),
                         ("/jobs", f'tr[data-job="{first.pk}"] .badge.sweep')):
        page.goto(live_web.url + where)
        assert page.locator(badge).inner_text() == f"sweep #{sweep.pk} · trial 0"
        page.click(badge)
        page.wait_for_url(f"{live_web.url}/sweeps/{sweep.pk}")
    assert page.locator(".badge.sweep").count() == 0


def test_a_campaign_is_started_from_a_cpu_trial_by_clicking(  # noqa: F811
        transactional_db, live_web, page, django_user_model, admin_user, output_dir, request):
    """The shipped recipes, a `builtin-grpo-cpu` sweep whose trial 0 completed: "campaign from it" in the trials
    table opens the New campaign form filled in (the trial's values, its CPU continuation chosen, the GPU ones not
    offered); a bad budget comes back refused with the form as sent; Create starts the campaign."""
    import yaml

    from campaigns.models import Campaign
    from launch.models import import_all
    from tests.conftest import ROOT
    from trainer.models import Status, Worker

    def set_up():
        import_all(yaml.safe_load((ROOT / "launch" / "examples" / "recipes.yaml").read_text()), admin_user)
        Worker.report("launch@cpu-a", "cpu-a", ["launch@cpu-a"], ["cpu"], cores=4)
        user = django_user_model.objects.get(username="olga")
        sweep = Sweep.create(created_by=user, name="cpu lr", team="research", recipe="builtin-grpo-cpu",
                             objective="per_dollar", space={"lr": {"low": 1e-4, "high": 1e-3, "log": True}},
                             params={"steps": 8}, budget_usd="1", parallel=1, max_trials=2)
        setup = sweep.setup_job
        assert setup.claim() and setup.finish(Status.COMPLETED)
        sweep.advance()
        trial = sweep.trials.select_related("job").get(number=0)
        assert trial.job.claim() and trial.job.finish(Status.COMPLETED)
        return sweep, trial.params

    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    sweep, params = in_thread(set_up)
    log_in(page, live_web.url, "olga", f"/sweeps/{sweep.pk}")
    page.click('#trials-table tr[data-trial="0"] a:has-text("campaign from it")')
    page.wait_for_url(f"{live_web.url}/campaigns?*")
    form = page.locator("#new-campaign[open] form")
    assert form.locator("select[name=run_recipe]").input_value() == "builtin-grpo-cpu"
    assert form.locator("select[name=continue_recipe]").input_value() == "builtin-grpo-cpu-continue"
    offered = form.locator("select[name=continue_recipe] option").all_inner_texts()
    assert not [o for o in offered if o.startswith(("trl-grpo-continue", "builtin-grpo-continue"))], offered
    assert json.loads(form.locator("input[name=run_params]").input_value()) == {"steps": 8, **params}
    assert form.locator("input[name=name]").input_value() == "cpu lr · trial 0"
    form.locator("input[name=envs]").fill("arithmetic")
    form.locator("input[name=budget_usd]").fill("-1")
    form.locator("button[type=submit]").click()
    assert "Campaign not created: budget_usd must be a number of dollars" in page.locator(".messages").inner_text()
    form = page.locator("#new-campaign[open] form")
    assert form.locator("select[name=continue_recipe]").input_value() == "builtin-grpo-cpu-continue", "kept"
    form.locator("input[name=budget_usd]").fill("2")
    form.locator("button[type=submit]").click()
    page.wait_for_url(f"{live_web.url}/campaigns/*")
    campaign = in_thread(lambda: Campaign.objects.get())
    assert (campaign.run_recipe, campaign.continue_recipe, campaign.run_params) == (
        "builtin-grpo-cpu", "builtin-grpo-cpu-continue", {"steps": 8, **params})
    shot(page, output_dir, request, "campaign-from-cpu-trial")

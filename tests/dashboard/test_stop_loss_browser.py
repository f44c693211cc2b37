"""The stop-loss in Chromium, in each place a person sets it: the Start form and the job page; and what the job
page says once it fired (its reason, and the money saved marked as an estimate)."""

from datetime import timedelta

import pytest

from alerts import stoploss as evaluate
from costs.attribution import attribute
from tests.alerts.test_stoploss import T0, a_job_on_a_dollar_a_minute, evals
from tests.browser import page  # noqa: F401 - fixture
from tests.costs.cost_builders import Fleet
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, shot, user_in_role
from tests.trainer.helpers import purge_jobs_queue
from trainer.models import Job, Status

pytestmark = pytest.mark.browser


def field(name):
    return f'[name="stop_loss.{name}"]'


def test_the_start_form_names_a_bad_stop_loss_field_then_starts_the_job_with_its_rule(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    purge_jobs_queue()
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/jobs")
    page.click("details#start summary")
    page.fill("#f-name", "guarded")
    page.fill("#f-team", "research")
    page.select_option("#f-preset", "smoke")
    page.fill(field("usd"), "0.50")
    try:
        page.click("#start-submit")
        assert "stop_loss.points is missing" in page.inner_text('[id="e-stop_loss.points"]')
        assert page.locator(field("usd")).input_value() == "0.50", "what was typed stays"
        shot(page, output_dir, request, "refused")
        assert Job.objects.count() == 0

        page.fill(field("points"), "1")
        page.fill(field("entropy_min"), "0.2")
        page.click("#start-submit")
        page.wait_for_url("**/jobs/*")
    finally:
        purge_jobs_queue()  # the run_job message: no worker here
    job = Job.objects.get()
    assert job.stop_loss == {"usd": "0.50", "points": 1.0, "entropy_min": 0.2, "steps": 5, "from_step": 0}
    assert page.inner_text("#stop-loss-rule") == ("Rule: stop when the last $0.50 bought fewer than 1 point, or when "
                                                  "entropy below 0.2 for 5 steps.")


def test_an_operator_sets_changes_and_removes_a_stop_loss_on_the_job_page(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    job = b.job(name="watched", status="running")
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", f"/jobs/{job.pk}")
    assert page.inner_text("#stop-loss-rule").startswith("No stop-loss")

    page.click("#stop-loss-edit summary")
    page.fill(field("kl_max"), "lots")
    page.click('#stop-loss-form button[name="set"]')
    assert "Stop-loss not changed: stop_loss.kl_max must be a KL > 0, got 'lots'." in page.inner_text(".messages")
    assert Job.objects.get(pk=job.pk).stop_loss == {}, "a refused rule stores nothing"

    page.click("#stop-loss-edit summary")
    page.fill(field("kl_max"), "0.5")
    page.fill(field("steps"), "3")
    page.click('#stop-loss-form button[name="set"]')
    assert page.inner_text("#stop-loss-rule") == "Rule: stop when KL above 0.5 for 3 steps."
    assert Job.objects.get(pk=job.pk).stop_loss == {"kl_max": 0.5, "steps": 3, "from_step": 0}
    page.click("#stop-loss-edit summary")
    assert page.locator(field("kl_max")).input_value() == "0.5", "the form shows the rule in force"
    shot(page, output_dir, request, "set")

    page.click('#stop-loss-form button[name="remove"]')
    assert page.inner_text("#stop-loss-rule").startswith("No stop-loss")
    assert Job.objects.get(pk=job.pk).stop_loss == {}


def test_the_job_page_says_why_the_stop_loss_stopped_it_and_what_that_saved_as_an_estimate(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    job = a_job_on_a_dollar_a_minute(Fleet(), stop_loss={"usd": "5", "points": 2})
    evals(job, [(0, 30, 10.0), (10, 210, 20.0), (20, 390, 20.5), (30, 570, 20.6)])
    attribute(now=T0 + timedelta(minutes=10))
    assert evaluate.check(now=T0 + timedelta(minutes=10)) == [job.pk]
    Job.objects.get(pk=job.pk).finish(Status.STOPPED, "stop-loss: steps 10 to 30 cost $6.00 and bought +0.6 points, "
                                                      "fewer than 2 points for $5; stopped at step 30")
    user_in_role(django_user_model, "vera", "viewer")
    log_in(page, live_server.url, "vera", f"/jobs/{job.pk}")

    assert page.inner_text("#stop-loss-fired") == ("Stopped by the stop-loss at step 30: steps 10 to 30 cost $6.00 and "
                                                   "bought +0.6 points, fewer than 2 points for $5.")
    saved = page.inner_text("#stop-loss-saved")
    assert saved.startswith("Saved ≈ $21.00 estimated")
    assert "projected from this run's own curve: the 70 steps left of 100 at $0.30 per step" in saved
    assert "projection" in page.get_attribute("#stop-loss-saved .badge.est", "title")
    assert page.locator("#stop-loss-edit").count() == 0, "a viewer changes nothing"
    assert "stop-loss: steps 10 to 30" in page.inner_text("#history-body tr:last-child")
    shot(page, output_dir, request, "fired")

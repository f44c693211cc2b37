"""Live, end to end, in Chromium: Daphne serves the pages and the socket, a real Celery worker trains.

An operator logs in, starts a job from the form, watches at least three new
steps arrive on the reward chart without a reload, stops it, and sees
`stopped` arrive on the page.
"""

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, shot, user_in_role
from tests.dashboard.live_stack import live_stack  # noqa: F401 - fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# A chart with nothing to draw yet is no plot (it says what is happening instead): 0 points until then.
POINTS = "(document.querySelector('[data-fig=reward]').data?.[2]?.x.length ?? 0)"


def test_an_operator_starts_a_job_watches_steps_arrive_live_and_stops_it(
    live_stack, page, transactional_db, django_user_model, output_dir, request  # noqa: F811
):
    from trainer.models import Job

    user_in_role(django_user_model, "otto", "operator", subprocess=True)
    base = live_stack.url
    log_in(page, base, "otto", "/jobs")

    page.click("details#start summary")
    page.select_option("#f-preset", "smoke")
    page.fill("#f-name", "live from the form")
    page.fill("#f-team", "research")
    page.fill("#f-steps", "20000")  # far more than the test waits for
    page.click("#start-submit")
    page.wait_for_url(base + "/jobs/*")
    job_id = int(page.url.rsplit("/", 1)[1])
    job = Job.objects.get(pk=job_id)
    assert (job.name, job.config["steps"], job.config["prompts_per_step"]) == ("live from the form", 20000, 4)

    page.wait_for_selector('#live-state[data-state="live"]')
    loaded_at = page.evaluate("window.__yardstickLoadedAt")
    before = page.evaluate(POINTS)
    page.wait_for_function(f"{POINTS} >= {before + 3}", timeout=120_000)
    assert page.evaluate("window.__yardstickLoadedAt") == loaded_at, "the points arrived without a reload"
    assert int(page.inner_text("#steps-done")) >= before + 2
    assert "running" in page.inner_text("#job-status")
    shot(page, output_dir, request, "running")

    page.click("button:has-text('■ Stop')")
    page.wait_for_url(f"{base}/jobs/{job_id}")
    page.wait_for_selector('#job-status .status[data-status="stopped"]', timeout=60_000)
    assert Job.objects.get(pk=job_id).status == "stopped"
    assert page.locator("button:has-text('▶ Resume')").is_visible(), "the Resume button appears for a stopped job"
    assert not page.locator("button:has-text('■ Stop')").is_visible()

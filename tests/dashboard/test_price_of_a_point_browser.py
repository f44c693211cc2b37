"""The job page's "Price of a point" card in Chromium, served by a real Daphne: it follows a running job's steps
as attribution charges them (the "costs" event), without a reload; then a person re-prices the job on another
GPU with the what-if form and reads an estimate."""

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest

from costs.money import usd_title
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import in_thread, log_in, shot, user_in_role
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.dashboard.test_live_updates_browser import LOADED_AT, open_live, priced_running_job, text_is

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def step(job, n, at, pass1=None):
    from trainer.models import Step

    metrics = {"timing/generate_s": 6.0, "timing/train_s": 3.0, "timing/eval_s": 1.0, "timing/step_s": 11.0,
               "performance/gen_tokens": 100_000, "performance/train_tokens": 150_000}
    if pass1 is not None:
        metrics["eval/pass1"] = pass1
    Step.objects.create(job=job, step=n, at=at, metrics=metrics, gen_tokens=100_000 if n else None, step_s=11.0,
                        eval_pass1=pass1)


def test_the_card_follows_the_steps_and_the_what_if_answers_with_an_estimate(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    from costs.tasks import attribute
    from trainer.models import Step

    job, _, (start, count, end) = priced_running_job("point live")
    Step.objects.create(job=job, step=0, at=start + timedelta(seconds=1), eval_pass1=30.0, metrics={"eval/pass1": 30.0})
    user_in_role(django_user_model, "vera", "viewer", subprocess=True)
    log_in(page, live_web.url, "vera", "/")
    stamp = open_live(page, live_web.url, f"/jobs/{job.pk}")
    assert page.inner_text("#pp-per-point") == "—" and page.inner_text("#pp-state") == "no cost yet"

    # Two steps arrive (200,000 rollout tokens, 6 points gained); attribution charges the minutes and publishes.
    step(job, 1, start + timedelta(seconds=20))
    step(job, 2, end - timedelta(seconds=1), pass1=36.0)
    in_thread(attribute)
    cost = Decimal("0.10") * count  # $6.00 an hour: $0.10 a device-minute, energy free
    per_mtok = cost / Decimal("0.2")
    cents = lambda d: f"${d.quantize(Decimal('0.01'), ROUND_HALF_UP)}"  # noqa: E731 - as costs.money writes them
    text_is(page, "#pp-per-mtok", cents(per_mtok))
    text_is(page, "#pp-mtok-per-point", "0.0333")  # 0.2 M tokens / 6 points
    text_is(page, "#pp-per-point", cents(cost / 6))
    assert page.get_attribute("#pp-per-point", "title") == usd_title(cost / 6), "the exact amount on hover"
    assert page.locator('#pp-phases-body tr[data-phase="generation"]').count() == 1
    assert page.locator("#pp-state").is_hidden()
    text_is(page, "#pp-cost", cents(cost))
    text_is(page, "#pp-tokens", "200,000")
    assert page.evaluate(LOADED_AT) == stamp, "updated in place, not reloaded"
    shot(page, output_dir, request, "live")

    # What if it ran on a GPU twice as fast? (every model is priced $6.00/h here: half the device time, half the cost)
    page.fill("#what-if-model", "NVIDIA Rubin")
    page.fill("#what-if-speedup", "2")
    page.click("#what-if-form button[type=submit]")
    page.wait_for_selector("#what-if-answer")
    answer = page.inner_text("#what-if-answer")
    assert answer.startswith("estimate") and "On NVIDIA Rubin" in answer
    assert "a speed-up of 2× typed by the user" in answer and "rated: 1800 W" in answer
    page.fill("#what-if-speedup", "fast")
    page.click("#what-if-form button[type=submit]")
    assert "speed-up must be a number above 0" in page.inner_text("#what-if-error")
    assert page.get_attribute("#what-if-speedup", "aria-invalid") == "true"
    shot(page, output_dir, request, "what-if")

"""An external run in Chromium, reported by the real mlflow client to a real Daphne: its job page shows the
badge, params, a chart per metric prefix that grows (and gains charts) live, its generations as rollout
samples and its images as figures; an operator sets its score key there."""

import json

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.files import PNG_W, png_bytes

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def reporter(live_web, django_user_model, api_token, monkeypatch):  # noqa: F811
    """The real mlflow client, pointed at the Daphne the browser reads, with a reporter's token."""
    import mlflow
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("trainer-bot")
    user.groups.add(Group.objects.get_or_create(name="reporter")[0])
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", api_token(user))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    mlflow.set_tracking_uri(live_web.url)
    yield mlflow
    if mlflow.active_run():
        mlflow.end_run()


def traces_x(page, fig):  # noqa: F811 - a page, not the fixture
    return page.evaluate("(f) => Array.from(document.querySelector(`.chart[data-fig='${f}']`).data, t => [t.name, Array.from(t.x)])", fig)


def test_an_external_runs_page_shows_what_it_logged_and_grows_live(  # noqa: F811
        live_web, reporter, page, django_user_model, output_dir, request, tmp_path):
    from tracking.models import Run

    mlflow = reporter
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    mlflow.set_experiment("verl-gsm8k")
    run = mlflow.start_run(run_name="qwen-ppo")
    mlflow.log_params({"actor_rollout_ref.rollout.n": 5, "trainer.total_training_steps": 10})
    # A framework logs its whole config: 200 keys, as TRL does.
    mlflow.log_params({f"config.key_{i:03d}": i for i in range(200)})
    for step in (1, 2):
        mlflow.log_metrics({"critic/score/mean": 0.2 * step, "actor/entropy": 1.5, "timing_s/gen": 3.0,
                            **{f"timing_s/stage_{i:02d}_of_the_update_in_seconds": 0.1 * i for i in range(16)}},
                           step=step)
    (tmp_path / "val_step2.json").write_text(json.dumps([{"input": "Natalia sold 48 clips...", "output": "72",
                                                          "score": 1.0}]))
    mlflow.log_artifact(str(tmp_path / "val_step2.json"))
    (tmp_path / "entropy.png").write_bytes(png_bytes())
    mlflow.log_artifact(str(tmp_path / "entropy.png"), "figures")
    job_id = Run.objects.get(run_id=run.info.run_id).job_id

    log_in(page, live_web.url, "olga", "/jobs")
    row = page.locator(f'tr[data-job="{job_id}"]')
    assert row.locator(".badge.ext").inner_text() == "external · verl"
    assert row.locator(".progress-text").inner_text() == "2 / 10", "its step count, from trainer.total_training_steps"

    record_events(page)
    page.goto(f"{live_web.url}/jobs/{job_id}")
    wait_subscribed(page)
    assert page.locator("h1 + .badge.ext").inner_text() == "external · verl"
    assert page.locator("#run-params").inner_text().count("actor_rollout_ref.rollout.n") == 1
    box = page.locator("#run-params").locator("xpath=..").bounding_box()
    assert box["height"] <= 400, "202 params scroll inside their box instead of stretching the page"
    for fig in ("logged:actor", "logged:critic", "logged:timing_s", "reward"):
        page.wait_for_selector(f".chart[data-fig='{fig}'][data-drawn='true']")
    assert traces_x(page, "logged:critic") == [["score/mean", [1, 2]]]
    # Seventeen timing keys: their legend wraps into rows the chart grows to hold, not drawn over the next card.
    page.wait_for_function("""() => { const c = document.querySelector(".chart[data-fig='logged:timing_s']");
        const legend = c.querySelector('.legend'), svg = c.querySelector('.main-svg');
        return legend && legend.getBoundingClientRect().bottom <= svg.getBoundingClientRect().bottom + 1; }""")
    fits = page.evaluate("""() => { const c = document.querySelector(".chart[data-fig='logged:timing_s']");
        const legend = c.querySelector('.legend').getBoundingClientRect();
        const card = c.closest('.card').getBoundingClientRect(), plot = c.querySelector('.bglayer rect').getBoundingClientRect();
        return [legend.height, legend.bottom <= card.bottom, plot.height]; }""")
    assert fits[0] > 100 and fits[1] and fits[2] > 150, fits
    assert page.locator("#samples-body").inner_text().startswith("0\tNatalia sold 48 clips...\t72\t1.00\t—")
    img = page.locator("#run-figures img")
    img.scroll_into_view_if_needed()  # loading="lazy": drawn as a person scrolls down to it
    page.wait_for_function("() => document.querySelector('#run-figures img').naturalWidth > 0")
    assert img.evaluate("i => i.naturalWidth") == PNG_W, "the PNG the run uploaded, drawn"
    loaded_at = page.evaluate("window.__yardstickLoadedAt")

    # Step 3 arrives live: an existing key grows its line, a new prefix gets a chart of its own.
    mlflow.log_metrics({"critic/score/mean": 0.7, "val-core/gsm8k/acc/mean_at_1": 0.41}, step=3)
    page.wait_for_function("() => document.querySelector(`.chart[data-fig='logged:val-core']`)?.dataset.drawn === 'true'")
    page.wait_for_function("() => Array.from(document.querySelector(`.chart[data-fig='logged:critic']`).data[0].x).includes(3)")
    assert traces_x(page, "logged:val-core") == [["gsm8k/acc/mean_at_1", [3]]]
    groups = page.eval_on_selector_all("#logged-charts .chart", "els => els.map(e => e.dataset.group)")
    assert groups == ["actor", "critic", "timing_s", "val-core"], "a new chart takes its place in name order"
    assert page.locator("#pass1-now").inner_text() == "41.0", "the default score key: veRL's val-core accuracy"
    # Generations of a later validation replace the samples shown, live.
    (tmp_path / "val_step3.json").write_text(json.dumps([{"input": "Weng earns $12 an hour...", "output": "10",
                                                          "score": 0.0}]))
    mlflow.log_artifact(str(tmp_path / "val_step3.json"))
    page.wait_for_function("() => document.querySelector('#samples-body').textContent.includes('Weng earns')")
    assert page.evaluate("window.__yardstickLoadedAt") == loaded_at, "no reload"
    shot(page, output_dir, request, "live")

    # The operator picks another score for the experiment.
    page.fill("#f-score-key", "critic/score/mean")
    page.click("#score-form button[type=submit]")
    page.wait_for_selector(".messages li.success")
    assert "Scored by critic/score/mean: set for experiment 'verl-gsm8k'." in page.locator("#score-now").inner_text()
    assert page.locator("#baseline-pass1").inner_text() == "0.2"
    mlflow.end_run()

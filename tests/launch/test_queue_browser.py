"""The line in Chromium, on a real launch worker with the fake NVML's two GPUs and Daphne serving the pages and their
socket: two 1-GPU runs hold both GPUs, an operator launches a third from the Start form and reads, on its page and in
the Jobs list, that it waits 1st in line; the queue panel says so; when the first run ends, the third starts on the
freed GPU and the list and the panel follow without a reload."""

import sys

import pytest

from launch.models import Launch
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import in_thread, log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.launch.conftest import launch
from tests.waiting import wait_for
from trainer.models import Job

PY = sys.executable
pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Holds its GPU until its output directory holds "finish".
HOLD = ("import os, sys, time\nprint('on GPU', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
        "while not os.path.exists(os.path.join(sys.argv[1], 'finish')): time.sleep(0.05)")


def finish(settings, job_id):
    folder = settings.DATA_DIR / "launched" / f"job-{job_id}"
    wait_for(folder.is_dir, what=f"job {job_id}'s output directory")
    (folder / "finish").write_text("")


def test_a_third_launch_waits_1st_in_line_and_the_list_and_the_queue_panel_follow_it_live(  # noqa: F811
        launch_worker, recipe, live_web, page, django_user_model, admin_user, settings, output_dir, request):
    recipe("hold", [PY, "-c", HOLD, "{job_dir}"], devices={"kind": "cuda", "count": 1}, stop_grace_s=[1, 2])
    first, second = (in_thread(lambda: launch("hold", admin_user)) for _ in range(2))
    wait_for(lambda: Job.objects.filter(pk__in=[first.pk, second.pk], status="running").count() == 2,
             what="both runs to hold a GPU")
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    record_events(page)
    log_in(page, live_web.url, "olga", "/jobs")
    row = page.locator('#queue-table tr[data-pool=""]')
    assert (row.locator(".queue-free").inner_text(), row.locator(".queue-held").inner_text(),
            row.locator(".queue-running").inner_text(), row.locator(".queue-waiting").inner_text()) == ("0", "2", "2", "0")
    assert row.locator(".queue-next").inner_text() == "nobody waits"

    page.click("details#start summary")
    page.select_option("#f-what", "recipe:hold")
    assert page.locator("#f-priority option").all_inner_texts() == ["low", "normal"], "high is for admins"
    page.fill("#f-team", "research")
    page.click("#start-submit")
    page.wait_for_selector("#job-line")
    third = Job.objects.order_by("-pk").first()
    assert page.url.endswith(f"/jobs/{third.pk}") and third.in_line
    waiting = "waiting for 1 × GPU in the shared pool: 1st in line (every GPU that would do is held)"
    assert waiting in page.inner_text(".messages") and page.inner_text("#job-waiting-for") == waiting
    assert page.inner_text(f'.status-note[data-job="{third.pk}"]') == waiting

    page.goto(f"{live_web.url}/jobs")
    wait_subscribed(page)
    mine = page.locator(f'#jobs-table tr[data-job="{third.pk}"]')
    assert mine.locator(".status-note").inner_text() == waiting
    assert mine.locator(".waited").inner_text().startswith("waiting ")
    assert row.locator(".queue-waiting").inner_text() == "1"
    assert row.locator(".queue-next a").inner_text() == f"#{third.pk} hold"
    shot(page, output_dir, request, "waiting")

    finish(settings, first.pk)
    page.wait_for_selector(f'#jobs-table tr[data-job="{third.pk}"] .job-status .status[data-status="running"]',
                           timeout=30_000)
    assert mine.locator(".status-note").is_hidden() and mine.locator(".waited").count() == 0
    page.wait_for_function("document.querySelector('#queue-table tr[data-pool=\"\"] .queue-waiting').textContent"
                           " === '0'", timeout=10_000)
    assert page.locator('#queue-table tr[data-pool=""] .queue-next').inner_text() == "nobody waits"
    shot(page, output_dir, request, "started")
    third.refresh_from_db()
    assert Launch.objects.get(pk=third.pk).gpus == Launch.objects.get(pk=first.pk).gpus
    assert third.placed_on == f"launch@{settings.YARDSTICK_NODE}"
    for job in (second, third):
        finish(settings, job.pk)

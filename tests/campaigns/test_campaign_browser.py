"""In Chromium against Daphne and a real Celery worker (tiny policies): the campaign page fills in live as the
starting policy is evaluated; Start loop runs a run and starts the next from it; Stop stops the loop and its run;
Continue on a job's page and on the campaign page start a job from that run's final checkpoint."""

import json
import urllib.request

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, shot, user_in_role
from tests.dashboard.live_stack import live_stack  # noqa: F401 - fixture
from tests.trainer.helpers import TINY
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def create_over_the_api(base, token, body):
    """POST /api/campaigns to the Daphne of the stack, so the tasks it sends reach the stack's worker."""
    req = urllib.request.Request(base + "/api/campaigns", json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["id"]


def test_the_loop_continue_and_the_live_page(live_stack, page, transactional_db, django_user_model,  # noqa: F811
                                              api_token, output_dir, request):
    from campaigns.models import Campaign, RetentionEval
    from trainer.models import ENDED, Job, Status

    otto = user_in_role(django_user_model, "otto", "operator", subprocess=True)
    base = live_stack.url
    # Runs of 12 tiny steps: Stop most often finds the second one queued or running (else it stops the loop only).
    cid = create_over_the_api(base, api_token(otto), {
        "name": "agentic", "team": "research", "envs": ["arithmetic", "toolcalc"],
        "run_config": {**TINY, "steps": 12, "eval_every": 4, "checkpoint_every": 4}, "eval_size": 8,
        "device": "cpu"})
    log_in(page, base, "otto", f"/campaigns/{cid}")
    page.wait_for_selector('#live-state[data-state="live"]')
    loaded_at = page.evaluate("window.__yardstickLoadedAt")

    # The starting policy's evals arrive on the page without a reload.
    page.wait_for_selector("#retention-table th:text-is('start')", timeout=60_000)
    assert page.evaluate("window.__yardstickLoadedAt") == loaded_at
    assert page.locator('[data-fig="scores"]').get_attribute("data-drawn") == "true"

    page.click("#loop-start")
    page.wait_for_selector("#loop-state[data-loop='running']")
    # Run 1 trains, is evaluated on both envs, and the loop starts run 2 on toolcalc from it: all shown live.
    page.wait_for_selector("#retention-table th:text-is('after run 1 (arithmetic)')", timeout=90_000)
    page.wait_for_selector("#runs-table tbody tr:nth-child(2)", timeout=30_000)
    first, second = Campaign.objects.get(pk=cid).jobs()[:2]
    assert (first.status, second.env, second.init_from_id) == (Status.COMPLETED, "toolcalc", first.pk)
    assert RetentionEval.objects.filter(campaign_id=cid, after_job=first).count() == 2
    shot(page, output_dir, request, "looping")

    page.click("#loop-stop")
    page.wait_for_selector("#loop-state[data-loop='stopped']")
    runs = Job.objects.filter(campaign_run__campaign_id=cid)
    wait_for(lambda: not runs.exclude(status__in=ENDED).exists(), 60, "the loop's current run to end")
    latest = runs.order_by("-id").first()
    assert latest.status in (Status.STOPPED, Status.COMPLETED)  # completed: it ended just before the Stop
    count = Job.objects.count()

    # Continue on run 1's page: a job on toolcalc from its final checkpoint, in the campaign.
    page.goto(f"{base}/jobs/{first.pk}")
    assert f"campaign #{cid} agentic" in page.inner_text(".page-head")
    page.click(f'[data-job-continue="{first.pk}"] summary')
    page.select_option(f'[data-job-continue="{first.pk}"] select[name=env]', "toolcalc")
    page.fill(f'[data-job-continue="{first.pk}"] input[name=steps]', "2")
    page.click(f'[data-job-continue="{first.pk}"] button[type=submit]')
    page.wait_for_url(f"{base}/jobs/*")
    forked = Job.objects.get(pk=int(page.url.rsplit("/", 1)[1]))
    assert (forked.env, forked.init_from_id, forked.steps_total) == ("toolcalc", first.pk, 2)
    assert f"continues #{first.pk}" in page.inner_text(".page-head")
    wait_for(lambda: Job.objects.get(pk=forked.pk).status == Status.COMPLETED, 60, "the continued job to complete")

    # Continue in the Jobs list: run 1's row, on its own env by default.
    page.goto(f"{base}/jobs/")
    row = page.locator(f'tr[data-job="{first.pk}"]')
    assert f"campaign #{cid}" in row.inner_text()
    row.locator(".job-continue-form summary").click()
    shot(page, output_dir, request, "jobs-continue")
    row.locator(".job-continue-form input[name=steps]").fill("2")
    row.locator(".job-continue-form button[type=submit]").click()
    page.wait_for_url(f"{base}/jobs/*")
    listed = Job.objects.get(pk=int(page.url.rsplit("/", 1)[1]))
    assert (listed.env, listed.init_from_id) == ("arithmetic", first.pk)
    wait_for(lambda: Job.objects.get(pk=listed.pk).status in ENDED, 60, "the job continued from the list to end")

    # Continue on the campaign page: from its latest run.
    page.goto(f"{base}/campaigns/{cid}")
    page.click(".loop-bar .job-continue-form summary")
    page.click(".loop-bar .job-continue-form button[type=submit]")
    page.wait_for_url(f"{base}/jobs/*")
    again = Job.objects.get(pk=int(page.url.rsplit("/", 1)[1]))
    assert again.init_from_id == listed.pk and Job.objects.count() == count + 3
    assert Campaign.objects.get(pk=cid).jobs().last() == again

    # Printed, the page drops its controls; the CSV is one click away.
    page.goto(f"{base}/campaigns/{cid}")
    page.emulate_media(media="print")
    assert not page.locator("#csv-link").is_visible() and not page.locator("#loop-start").is_visible()
    wait_for(lambda: Job.objects.get(pk=again.pk).status in ENDED, 60, "the last job to end")

"""Stop, Resume and Compare in Chromium, in each place a person clicks them; and the Start form's fields."""

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, shot, user_in_role
from tests.trainer.helpers import purge_jobs_queue
from trainer.models import Job, Status

pytestmark = pytest.mark.browser


def controls(page, job, kind):
    return page.locator(f'[data-job-controls="{job.pk}"] .job-{kind}-form button')


def test_stop_in_the_jobs_list_stops_that_rows_job_and_puts_no_token_in_the_url(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    done = [b.job(name=f"done {i}", status="completed") for i in range(2)]
    running = b.job(name="running one", status="running")  # newest: the first row
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/jobs")

    assert page.locator("#jobs-table tbody tr").first.get_attribute("data-job") == str(running.pk)
    assert all(not controls(page, job, "stop").is_visible() for job in done), "a completed job offers no Stop"
    assert all(not controls(page, job, "resume").is_visible() for job in done)
    shot(page, output_dir, request, "before")
    controls(page, running, "stop").click()
    page.wait_for_url(live_server.url + "/jobs")

    assert "csrfmiddlewaretoken" not in page.url and "/compare" not in page.url
    assert Job.objects.get(pk=running.pk).status in (Status.STOPPING, Status.STOPPED)
    assert f"Job {running.pk} is stopping." in page.inner_text(".messages")
    assert not controls(page, running, "stop").is_visible()
    assert all(Job.objects.get(pk=job.pk).status == Status.COMPLETED for job in done)


def test_resume_in_the_jobs_list_queues_that_job_again(  # noqa: F811
        live_server, page, transactional_db, django_user_model):
    stopped = b.job(name="stopped one", status="stopped")
    b.job(name="running one", status="running")
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/jobs")
    try:
        controls(page, stopped, "resume").click()
        page.wait_for_url(live_server.url + "/jobs")
    finally:
        purge_jobs_queue()  # the run_job message the resume sent: no worker here
    assert Job.objects.get(pk=stopped.pk).status == Status.QUEUED
    assert "csrfmiddlewaretoken" not in page.url


def test_compare_with_checked_boxes_goes_to_compare_with_the_picks_and_no_token(  # noqa: F811
        live_server, page, transactional_db, django_user_model):
    first, second = b.job(name="first", status="completed"), b.job(name="second", status="completed")
    b.steps(first, 6)
    b.steps(second, 6)
    b.job(name="running", status="running")
    user_in_role(django_user_model, "vera", "viewer")
    log_in(page, live_server.url, "vera", "/jobs")

    page.check(f'input[name="pick"][value="{first.pk}"]')
    page.check(f'input[name="pick"][value="{second.pk}"]')
    page.click("#compare-submit")
    page.wait_for_url("**/compare?**")
    url = urlsplit(page.url)
    assert url.path == "/compare"
    assert parse_qs(url.query) == {"pick": [str(second.pk), str(first.pk)]}, "the picks, and nothing else"


def test_stop_then_resume_on_the_job_page(live_server, page, transactional_db, django_user_model):  # noqa: F811
    job = b.job(name="on its page", status="running")
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", f"/jobs/{job.pk}")
    assert not controls(page, job, "resume").is_visible()

    controls(page, job, "stop").click()
    page.wait_for_url(f"{live_server.url}/jobs/{job.pk}")
    assert Job.objects.get(pk=job.pk).status == Status.STOPPING and "csrfmiddlewaretoken" not in page.url
    assert not controls(page, job, "stop").is_visible() and not controls(page, job, "resume").is_visible()

    Job.objects.get(pk=job.pk).finish(Status.STOPPED, "stopped at step 0")  # what the worker does next
    page.goto(f"{live_server.url}/jobs/{job.pk}?live=0")
    try:
        controls(page, job, "resume").click()
        page.wait_for_url(f"{live_server.url}/jobs/{job.pk}?live=0")
    finally:
        purge_jobs_queue()
    assert Job.objects.get(pk=job.pk).status == Status.QUEUED
    assert controls(page, job, "stop").is_visible(), "a queued job can be cancelled"


def test_a_job_that_failed_for_a_missing_device_offers_no_resume_and_says_why(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    job = b.job(name="gpu wanted", status="failed")
    Job.objects.filter(pk=job.pk).update(
        error="DeviceUnavailable: device cuda was requested but host-a has 0 CUDA device(s); use auto, cpu",
        not_resumable_reason="its device cuda is not on the worker that ran it; start a new job with a device "
                             "the workers have (auto runs anywhere)")
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/jobs")
    for path in ("/jobs", f"/jobs/{job.pk}?live=0"):
        page.goto(live_server.url + path)
        assert not controls(page, job, "resume").is_visible() and not controls(page, job, "stop").is_visible()
        assert "cannot be resumed: its device cuda is not on the worker" in page.inner_text(
            f'[data-job-controls="{job.pk}"]')
    shot(page, output_dir, request, "job-page")


def test_the_start_form_marks_required_fields_labels_hyperparameters_and_shows_whole_presets(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/jobs")
    for width in (1440, 900, 420):
        page.set_viewport_size({"width": width, "height": 900})
        page.reload()
        page.click("details#start summary")
        fit = page.evaluate("""() => {
            const sel = document.getElementById('f-preset'), cs = getComputedStyle(sel);
            const ctx = document.createElement('canvas').getContext('2d'); ctx.font = cs.font;
            const text = Math.max(...[...sel.options].map(o => ctx.measureText(o.text).width));
            // Chromium draws the arrow in the right padding area: leave it 20 px.
            const room = sel.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 20;
            return {text, room, scroll: sel.scrollWidth, client: sel.clientWidth};
        }""")
        assert fit["text"] <= fit["room"], f"at {width} px the longest preset needs {fit}"
        assert fit["scroll"] <= fit["client"]
        shot(page, output_dir, request, f"{width}")

    labels = {f: page.inner_text(f'label[for="f-{f}"]') for f in ("name", "team", "env", "steps", "group_size",
                                                                   "budget_usd")}
    assert labels["name"] == "Name *" and labels["team"] == "Team *" and labels["env"] == "Environment *"
    assert labels["steps"] == "Training steps (GRPO updates)" and labels["group_size"] == "Completions per prompt"
    assert labels["budget_usd"] == "Budget (USD)"
    assert page.locator("#f-name").get_attribute("aria-required") == "true"
    assert page.evaluate("document.getElementById('f-team').required") is True
    assert "group_size" in page.inner_text('.field:has(#f-group_size) .hint'), "the field's name stays visible"


def test_the_start_form_shows_where_jobs_can_run_and_places_the_job_on_the_node_picked(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    from trainer.models import Worker

    purge_jobs_queue()
    Worker.report("jobs@cpu-a", "cpu-a", ["jobs", "jobs@cpu-a"], ["cpu"], cores=2)
    Worker.report("jobs@gpu-b", "gpu-b", ["jobs", "jobs@gpu-b"], ["cpu", "cuda:0", "cuda:1"], cores=16,
                  gpus=[{"index": i, "uuid": f"GPU-b{i}", "name": "NVIDIA H200", "memory_mib": 143771} for i in (0, 1)])
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/jobs")
    page.click("details#start summary")
    rows = page.locator("#workers tbody tr")
    assert rows.count() == 2 and "2 × NVIDIA H200 #0, #1" in rows.nth(1).inner_text()

    page.fill("#f-name", "two gpus on b")
    page.fill("#f-team", "research")
    page.select_option("#f-preset", "smoke")
    page.select_option("#f-node", "cpu-a")
    page.fill("#f-device", "cuda")
    page.fill("#f-devices", "2")
    page.click("#start-submit")
    # cpu-a has no GPU: the form comes back naming the device, and nothing is started.
    assert "device cuda is not on any jobs worker on node cpu-a" in page.inner_text("#e-device")
    shot(page, output_dir, request, "refused")
    assert Job.objects.count() == 0

    page.select_option("#f-node", "gpu-b")
    page.click("#start-submit")
    page.wait_for_url("**/jobs/*")
    job = Job.objects.get()
    assert (job.node, job.device, job.devices, job.placed_on) == ("gpu-b", "cuda", 2, "jobs@gpu-b")
    assert page.inner_text("#asked-for") == "Asked for 2 × cuda on node gpu-b; sent to jobs@gpu-b."

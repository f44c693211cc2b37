"""Run again..., Continue... and the Jobs list's filters in Chromium, clicked where a user clicks them: the job page
and the Jobs list."""

import pytest

from launch import kind
from launch.models import Launch, Recipe
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, shot, user_in_role
from tests.dashboard.test_launch_pages import GPUS, TYPED, ended
from tests.dashboard.test_run_again import CONTINUING
from trainer.models import Job, Status, Worker

pytestmark = pytest.mark.browser


@pytest.fixture
def world(transactional_db, django_user_model, admin_user):
    Worker.report("launch@node-a", "node-a", ["launch@node-a"], ["cpu", "cuda:0", "cuda:1"], cores=16, gpus=GPUS)
    Recipe.define("typed", TYPED, admin_user)
    Recipe.define("typed-on", CONTINUING, admin_user)
    op = user_in_role(django_user_model, "olga", "operator")
    job = kind.start(recipe="typed", params={"steps": 7, "size": "large", "label": "base"}, name="walk trl",
                     team="research", created_by=op)
    job = ended(Job.objects.get(pk=job.pk), Status.STOPPED, checkpoints=["checkpoint-7"], job_dir="/tmp/j", node="node-a")
    Job.objects.filter(pk=job.pk).update(checkpoint_step=7)
    other = kind.start(recipe="typed-on", params={}, team="search", created_by=admin_user, init_from=job.pk)
    return job, Job.objects.get(pk=other.pk)


def test_run_again_from_the_job_page_starts_the_edited_job(live_server, page, world, output_dir, request):  # noqa: F811
    job, _ = world
    log_in(page, live_server.url, "olga", f"/jobs/{job.pk}")
    page.click(f'a[aria-label="Run job {job.pk} again with changes"]')
    page.wait_for_url(f"{live_server.url}/jobs?again={job.pk}#start")
    assert page.locator("#f-what").input_value() == "recipe:typed"
    assert page.locator("#f-typed-steps").is_visible() and page.locator("#f-typed-steps").input_value() == "7"
    assert page.locator("#f-name").input_value() == "walk trl" and page.locator("#f-team").input_value() == "research"
    assert page.locator("#f-typed-size").input_value() == "large"
    page.fill("#f-typed-steps", "11")
    shot(page, output_dir, request, "filled")
    page.click("#start-submit")
    page.wait_for_url(f"{live_server.url}/jobs/{job.pk + 2}")
    new = Job.objects.get(pk=job.pk + 2)
    assert (new.name, Launch.objects.get(pk=new.pk).values["steps"], Launch.objects.get(pk=new.pk).values["size"]) == (
        "walk trl", 11, "large")


def test_continue_from_the_jobs_list_and_the_filters_there(live_server, page, world, output_dir, request):  # noqa: F811
    job, other = world
    log_in(page, live_server.url, "olga", "/jobs")
    row = page.locator(f'tr[data-job="{job.pk}"]')
    row.locator("summary", has_text="Continue…").click()
    row.locator("a", has_text="typed-on").click()
    page.wait_for_url(f"{live_server.url}/jobs?continue={job.pk}&what=recipe:typed-on#start")
    assert page.locator("#f-what").input_value() == "recipe:typed-on"
    assert page.locator("#f-typed-on-init_from").input_value() == str(job.pk)
    assert page.locator("#f-typed-on-label").input_value() == "base"

    page.goto(live_server.url + "/jobs")
    assert page.locator("#jobs-table tbody tr[data-job]").count() == 2
    page.select_option("#filter-recipe", "typed-on")
    page.click("#jobs-filters button[type=submit]")
    page.wait_for_url(f"{live_server.url}/jobs?*recipe=typed-on*")
    rows = page.locator("#jobs-table tbody tr[data-job]")
    assert rows.count() == 1 and rows.first.get_attribute("data-job") == str(other.pk)
    shot(page, output_dir, request, "filtered")
    page.click("#filters-clear")
    page.wait_for_url(f"{live_server.url}/jobs")
    assert page.locator("#jobs-table tbody tr[data-job]").count() == 2

"""The link the MLflow client prints after a run ("View run ... at <URI>/#/experiments/1/runs/<id>") opens
the run's job page."""

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, user_in_role
from tracking import store

pytestmark = pytest.mark.browser


def test_the_clients_view_run_link_opens_the_runs_job_page(live_server, page, transactional_db,  # noqa: F811
                                                          django_user_model):
    experiment = store.create_experiment("grpo-math")
    run = store.create_run(experiment.pk, run_name="qwen-grpo")
    user_in_role(django_user_model, "vera", "viewer")
    log_in(page, live_server.url, "vera", "/jobs")

    page.goto(f"{live_server.url}/#/experiments/{experiment.pk}/runs/{run.run_id}")
    page.wait_for_url(f"{live_server.url}/jobs/{run.job_id}")
    assert "qwen-grpo" in page.inner_text("h1")

    page.goto(f"{live_server.url}/#/experiments/{experiment.pk}")  # its runs: the Jobs list of its environment
    page.wait_for_url(f"{live_server.url}/jobs?env=grpo-math")
    assert page.locator("#filter-env").input_value() == "grpo-math"
    assert page.locator("#jobs-table tbody tr[data-job]").count() == 1

    page.goto(f"{live_server.url}/")  # already on the page: only the fragment changes
    page.evaluate(f"window.location.hash = '#/experiments/{experiment.pk}/runs/{run.run_id}'")
    page.wait_for_url(f"{live_server.url}/jobs/{run.job_id}")


def test_the_link_opened_before_logging_in_opens_the_runs_job_page_after(live_server, page, transactional_db,  # noqa: F811
                                                                          django_user_model):
    """The printed link opened in a browser with no session: the login page must not drop where it led."""
    from tests.dashboard.browser_helpers import PASSWORD

    experiment = store.create_experiment("grpo-math")
    run = store.create_run(experiment.pk, run_name="qwen-grpo")
    user_in_role(django_user_model, "vera", "viewer")

    page.goto(f"{live_server.url}/#/experiments/{experiment.pk}/runs/{run.run_id}")
    page.wait_for_url(f"{live_server.url}/accounts/login/?next=/runs/{run.run_id}")
    page.fill("#id_username", "vera")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/jobs/{run.job_id}")
    assert "qwen-grpo" in page.inner_text("h1")


def test_an_unknown_run_is_a_404_and_a_viewer_is_needed(client, viewer):
    assert client.get("/runs/" + "0" * 32).status_code == 302, "to the login page"
    client.force_login(viewer)
    assert client.get("/runs/" + "0" * 32).status_code == 404
    assert client.get("/experiments/999").status_code == 404

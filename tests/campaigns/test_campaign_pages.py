"""The campaign pages, Continue on a job's page and the campaign on its runs' pages and in the Jobs list."""

import pytest
from django.test import Client

from campaigns.models import Campaign
from tests.trainer.helpers import TINY
from trainer import runner
from trainer.models import Job


@pytest.fixture
def client_as(request, db):
    def login(fixture):
        client = Client()
        client.force_login(request.getfixturevalue(fixture))
        return client

    return login


@pytest.fixture
def campaign(data_dir, operator, make_job):
    c = Campaign.create(name="agentic", team="research", envs=["arithmetic", "toolcalc"],
                        run_config={**TINY, "steps": 2}, eval_size=8, device="cpu", created_by=operator)
    c.evaluate_retention()
    job = runner.run(make_job(steps=2).pk)
    c.add_run(job)
    c.evaluate_retention(after=job)
    return c


def test_the_campaign_page_shows_budget_runs_retention_and_the_projection(client_as, campaign):
    html = client_as("viewer").get(f"/campaigns/{campaign.pk}").content.decode()
    job = campaign.latest_job()
    assert 'id="campaign-cost"' in html and 'id="runs-table"' in html and f'data-job="{job.pk}"' in html
    assert "after run 1 (arithmetic)" in html and 'id="retention-table"' in html
    assert "a fit, not a measurement" in html  # the projection is labelled as one
    assert 'data-fig="scores"' in html and "<script id=\"figures\"" in html
    assert "Start loop" not in html  # viewers get no controls


def test_the_campaign_says_its_dollars_rest_on_example_prices_where_they_do(client_as, campaign):
    from costs.models import PriceEntry
    from tests.campaigns.charge import charge

    charge([campaign.latest_job()])  # a price book of real prices (not examples)
    client = client_as("viewer")
    assert 'id="campaign-flags"' not in client.get(f"/campaigns/{campaign.pk}").content.decode()
    PriceEntry.objects.update(is_example=True)
    html = client.get(f"/campaigns/{campaign.pk}").content.decode()
    flags = html.split('id="campaign-flags"')[1].split("</div>")[0]
    assert "$ example prices" in flags and "simulated" not in flags


def test_operators_get_the_loop_and_continue_controls(client_as, campaign):
    html = client_as("operator").get(f"/campaigns/{campaign.pk}").content.decode()
    assert 'id="loop-start"' in html and "Continue job" in html


def test_a_bad_points_parameter_is_a_400(client_as, campaign):
    resp = client_as("viewer").get(f"/campaigns/{campaign.pk}?points=0")
    assert resp.status_code == 400 and "points must be an integer" in resp.content.decode()


def test_continue_on_a_job_page_starts_a_job_in_its_campaign(client_as, campaign):
    job = campaign.latest_job()
    client = client_as("operator")
    page = client.get(f"/jobs/{job.pk}").content.decode()
    assert f'action="/jobs/{job.pk}/continue"' in page and f"campaign #{campaign.pk} agentic" in page
    resp = client.post(f"/jobs/{job.pk}/continue", {"env": "toolcalc", "steps": "3"})
    new = Job.objects.latest("id")
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{new.pk}"
    assert (new.env, new.steps_total, new.init_from_id, new.init_step) == ("toolcalc", 3, job.pk, 2)
    assert list(campaign.jobs()) == [job, new]
    jobs_list = client.get("/jobs").content.decode()
    assert jobs_list.count(f'data-campaign="{campaign.pk}"') == 2 and f"continues #{job.pk}" in jobs_list
    from tests.trainer.helpers import purge_jobs_queue

    purge_jobs_queue()


def test_continue_refuses_a_job_that_has_not_ended(client_as, make_job):
    queued = make_job()
    resp = client_as("operator").post(f"/jobs/{queued.pk}/continue", {"env": "arithmetic"}, follow=True)
    assert "Not continued: init_from: job" in resp.content.decode()
    assert Job.objects.count() == 1


def test_the_campaigns_list_and_its_form(client_as, data_dir):
    client = client_as("operator")
    resp = client.post("/campaigns/create", {"name": "c", "team": "t", "envs": "arithmetic, toolcalc", "steps": "5",
                                             "budget_usd": "2.50"})
    c = Campaign.objects.get()
    assert resp["Location"] == f"/campaigns/{c.pk}"
    assert (c.envs, c.run_config, str(c.budget_usd)) == (["arithmetic", "toolcalc"], {"steps": 5}, "2.500000")
    bad = client.post("/campaigns/create", {"name": "c", "team": "t", "envs": "chess"}, follow=True)
    assert "Campaign not created: envs must be" in bad.content.decode()
    html = client.get("/campaigns").content.decode()
    assert f'href="/campaigns/{c.pk}"' in html and "New campaign" in html

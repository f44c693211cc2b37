"""The costs page: period and grouping, stacked bars by day, totals that add up, CSV and print links."""

import json
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, shot, user_in_role
from trainer.models import Job

UTC = timezone.utc


def test_it_shows_the_report_with_totals_and_a_stacked_bar(viewer_client):
    b.charged_fleet()
    resp = viewer_client.get("/costs?group=team")
    assert resp.status_code == 200
    totals = resp.context["totals"]
    assert totals["attributed_usd"] + totals["idle_usd"] == totals["fleet_usd"]
    assert totals["simulated"] is True
    fig = json.loads(resp.context["figures_json"])["by_day"]
    names = [t["name"] for t in fig["data"]]
    assert names == ["research", "idle (infra)"], "teams first, idle (hatched) last"
    assert abs(sum(sum(t["y"]) for t in fig["data"]) - float(totals["fleet_usd"])) < 0.02
    html = resp.content.decode()
    assert "◇ includes simulated devices" in html
    assert 'media="print"' in html and "yardstick/print.css" in html
    csv_href = resp.context["csv_href"]
    assert csv_href.startswith("/api/costs?") and "format=csv" in csv_href and "group=team" in csv_href


def test_group_by_job_links_each_job(viewer_client):
    job = b.charged_fleet()
    html = viewer_client.get("/costs?group=job").content.decode()
    assert f'href="/jobs/{job.pk}"' in html and "idle (infra)" in html


def test_bad_parameters_are_named(viewer_client):
    resp = viewer_client.get("/costs?group=planet")
    assert resp.status_code == 400 and "group must be one of team, job, node, day" in resp.content.decode()
    edge = viewer_client.get("/costs?to=9999-12-31")  # overflowed (500) stepping past the day
    assert edge.status_code == 400 and "to must be a time from 1970-01-01 to 2100-01-01" in edge.content.decode()


def cheap_fleet():
    """Two cheap jobs of one team and an idle GPU: every stack of the day is a fraction of a cent
    ($0.01/h: 5 and 10 device-minutes of jobs, 15 idle; energy free)."""
    now = datetime.now(UTC)
    start = b.floor_minute(now) - timedelta(minutes=20)
    b.prices(per_hour="0.01", per_kwh="0", pue="1")
    n = b.node("gpu-a", team="infra")
    d0 = b.device(n, 0)
    b.minutes(d0, start, 15, power_w=100)
    b.minutes(b.device(n, 1), start, 15, power_w=100)
    alpha, beta = b.job(name="alpha", team="research"), b.job(name="beta", team="research")
    b.stint(alpha, d0, start, start + timedelta(minutes=5))
    b.stint(beta, d0, start + timedelta(minutes=5), start + timedelta(minutes=15))
    b.attribute(now)
    return alpha, beta


def test_the_chart_stacks_by_the_chosen_grouping_with_unrounded_dollars(viewer_client):
    with connection.cursor() as cur:  # alpha #9, beta #10: the stacks go by id, not by the label's text
        cur.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), 8)", [Job._meta.db_table])
    alpha, beta = cheap_fleet()
    assert (alpha.pk, beta.pk) == (9, 10)

    by_job = json.loads(viewer_client.get("/costs?group=job").context["figures_json"])["by_day"]
    by_team = json.loads(viewer_client.get("/costs?group=team").context["figures_json"])["by_day"]

    assert [t["name"] for t in by_job["data"]] == [f"#{alpha.pk} alpha", f"#{beta.pk} beta", "idle (infra)"]
    assert [t["name"] for t in by_team["data"]] == ["research", "idle (infra)"]
    # 5 minutes at $0.01/h: $0.000833, drawn as such (rounded to the cent, every bar was 0).
    assert abs(by_job["data"][0]["y"][-1] - 0.01 * 5 / 60) < 1e-9
    assert by_job["data"][0]["customdata"][-1] == "$0.00083"


@pytest.mark.browser
def test_a_person_sees_cheap_costs_drawn_and_grouped_by_job_the_legend_names_jobs(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request):
    alpha, beta = cheap_fleet()
    user_in_role(django_user_model, "cora", "viewer")
    log_in(page, live_server.url, "cora", "/costs?group=team")
    drawn = '.chart[data-fig="by_day"][data-drawn="true"]'
    heights = "() => document.querySelector('[data-fig=by_day]').data.map(t => t.y.reduce((a, b) => a + b, 0))"

    page.wait_for_selector(drawn)
    assert page.inner_text("#total-fleet") == "$0.01", "the table shows money"
    assert all(h > 0 for h in page.evaluate(heights)), "so the chart draws it"
    page.select_option('select[name="group"]', "job")
    page.click("text=Show")
    page.wait_for_url("**group=job**")
    page.wait_for_selector(drawn)

    legend = page.locator('[data-fig="by_day"] .legendtext').all_text_contents()
    assert sorted(legend) == [f"#{alpha.pk} alpha", f"#{beta.pk} beta", "idle (infra)"]
    assert all(h > 0 for h in page.evaluate(heights))
    shot(page, output_dir, request, "by-job")


def test_a_job_stopped_before_its_first_step_counts_as_waiting_not_as_no_split(viewer_client):
    from decimal import Decimal

    now = datetime.now(UTC)
    start = b.floor_minute(now) - timedelta(minutes=20)
    b.prices(per_hour="6.00", per_kwh="0", pue="1")
    gpu = b.device(b.node("gpu-a", team="infra"), 0)
    b.minutes(gpu, start, 10)
    job = b.job(name="first on arithmetic", status="stopped")  # stopped while building its base policy: no step
    b.stint(job, gpu, start, start + timedelta(minutes=10))
    b.attribute(now)

    resp = viewer_client.get("/costs?group=job")

    phases = {p["key"]: p for p in resp.context["phases"]}
    attributed = Decimal(resp.context["totals"]["attributed_exact_usd"])
    assert attributed > 0
    assert phases["waiting"]["usd"] == attributed and phases["waiting"]["share"] == "100.0 %"
    assert phases["no_split"]["usd"] == 0


def test_a_period_without_costs_says_so_in_the_charts_place_and_its_stacks_keep_a_legend(viewer_client):
    empty = json.loads(viewer_client.get("/costs?group=team").context["figures_json"])["by_day"]
    assert empty["empty"] == "No costs in this period" and empty["data"] == []

    b.charged_fleet()
    fig = json.loads(viewer_client.get("/costs?group=node").context["figures_json"])["by_day"]
    assert "empty" not in fig and [t["name"] for t in fig["data"]] == ["gpu-a", "idle (gpu-a)"]
    assert fig["layout"]["showlegend"] is True, "Plotly would hide the legend of a lone stack"


def test_a_person_sees_a_period_without_costs_said_where_the_chart_would_be(  # noqa: F811
        live_server, page, transactional_db, django_user_model):
    user_in_role(django_user_model, "cy", "viewer")
    log_in(page, live_server.url, "cy", "/costs")

    page.wait_for_selector('.chart[data-fig="by_day"][data-drawn="empty"]')
    assert page.inner_text('[data-fig="by_day"] .chart-empty p') == "No costs in this period"
    assert page.locator('[data-fig="by_day"] .main-svg').count() == 0, "no bare axes"

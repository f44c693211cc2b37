"""A 40-step job on a laptop that cost a fraction of a cent: the same non-zero cost and IPD on the job page,
the Jobs list, Compare and Costs, in Chromium, and the same numbers in /api/costs, its CSV,
/api/costs/jobs/<id> and /api/jobs/<id>.

Hand-computed: the job holds a device for 4 minutes at $0.05/h and 30 W at $0.10/kWh, PUE 1:
4/60 h x $0.05 = $0.0033333 + 30 W x 240 s = 0.002 kWh x $0.10 = $0.0002, so $0.0035333. Its eval
goes from 30 to 46.8 points: 16.8 points / $0.0035333 = 4,755 points per dollar. Rounded to the
cent first, the cost was "$0.00" and the IPD "no cost yet".
"""

import csv
import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costs.money import ipd_text
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, shot, user_in_role

UTC = timezone.utc
COST = "$0.0035"
IPD = "4,755"


def cheap_job():
    now = datetime.now(UTC)
    start = b.floor_minute(now) - timedelta(minutes=10)
    b.prices(per_hour="0.05", per_kwh="0.10", pue="1")
    laptop = b.device(b.node("laptop", team="me"), 0, model="Test CPU")
    b.minutes(laptop, start, 4, power_w=30)
    job = b.job(name="forty steps", team="me", steps_total=40)
    b.stint(job, laptop, start, start + timedelta(minutes=4))
    b.steps(job, 40, start=start, every_s=6, eval_every=10, pass1=(30.0, 0.42))  # 30 -> 46.8 points
    b.attribute(now)
    return job


def test_the_api_and_the_csv_carry_the_exact_cost_from_which_the_ipd_is_recomputed_by_hand(viewer_client):
    job = cheap_job()

    card = viewer_client.get(f"/api/costs/jobs/{job.pk}").json()
    detail = viewer_client.get(f"/api/jobs/{job.pk}").json()["money"]
    body = viewer_client.get("/api/costs", {"group": "job"}).json()
    text = viewer_client.get("/api/costs", {"group": "job", "format": "csv"}).content.decode()

    assert card["cost_usd"] == "0.003533" and card["state"] == "ok"
    assert (card["cost_display"], card["ipd_display"]) == (COST, IPD)
    assert card["cost_title"] == "exact: $0.003533"
    assert {k: detail[k] for k in ("cost_usd", "points_per_usd", "cost_display", "ipd_display")} == {
        "cost_usd": card["cost_usd"], "points_per_usd": card["ipd_points_per_usd"], "cost_display": COST,
        "ipd_display": IPD}
    [row] = [r for r in body["rows"] if r["key"] == str(job.pk)]
    assert row["attributed_exact_usd"] == card["cost_usd"]
    assert row["ipd_points_per_usd"] == card["ipd_points_per_usd"]
    assert (row["cost_display"], row["ipd_display"]) == (COST, IPD)
    [csv_row] = [r for r in csv.DictReader(io.StringIO(text)) if r["key"] == str(job.pk)]
    by_hand = Decimal(csv_row["gain_points"]) / Decimal(csv_row["attributed_exact_usd"])  # 16.8 / 0.003533
    assert abs(Decimal(csv_row["ipd_points_per_usd"]) / by_hand - 1) < Decimal("0.0005"), "to the micro-dollar"
    assert ipd_text(by_hand) == IPD
    assert csv_row["total_usd"] == "0.00", "the table's cells still add up to the cent"


@pytest.mark.browser
def test_a_person_sees_the_same_cost_and_ipd_on_every_page(live_server, page, transactional_db,  # noqa: F811
                                                            django_user_model, output_dir, request):
    job = cheap_job()
    user_in_role(django_user_model, "lou", "viewer")
    log_in(page, live_server.url, "lou", f"/jobs/{job.pk}")

    seen = {"job page": (page.inner_text("#job-cost"), page.inner_text("#job-ipd"))}
    assert page.get_attribute("#job-cost span", "title") == "exact: $0.003533", "the exact figure on hover"
    page.goto(f"{live_server.url}/jobs/")
    row = f'#jobs-table tr[data-job="{job.pk}"]'
    seen["jobs list"] = (page.inner_text(f"{row} .job-cost"), page.inner_text(f"{row} .job-ipd"))
    assert "intelligence per dollar" in page.get_attribute("#jobs-table thead abbr", "title")
    page.goto(f"{live_server.url}/compare?jobs={job.pk}")
    seen["compare"] = (page.inner_text("#compare-table .job-cost"), page.inner_text("#compare-table .job-ipd"))
    page.goto(f"{live_server.url}/costs/?group=job")
    seen["costs"] = (page.inner_text("#cost-table tbody .job-cost"), page.inner_text("#cost-table tbody .job-ipd"))
    shot(page, output_dir, request, "costs")

    assert {where: (cost, ipd.replace(" pts/$", "")) for where, (cost, ipd) in seen.items()} == {
        where: (COST, IPD) for where in seen}, seen

"""The costs page: period and grouping, stacked bars by day, totals that add up, CSV and print links."""

import json
from datetime import datetime, timedelta, timezone

from tests.dashboard import builders as b

UTC = timezone.utc


def charged_fleet():
    now = datetime.now(UTC)
    start = b.floor_minute(now) - timedelta(minutes=40)
    b.prices(per_hour="3.60", per_kwh="0.10", pue="1.5")
    n = b.node("gpu-a", team="infra")
    d0, d1 = b.device(n, 0), b.device(n, 1, source="sim", simulated=True)
    b.minutes(d0, start, 30, power_w=400)
    b.minutes(d1, start, 30, power_w=200)
    job = b.job(name="grpo", team="research")
    b.stint(job, d0, start, start + timedelta(minutes=20))
    b.steps(job, 10, start=start, every_s=60)
    b.attribute(now)
    return job


def test_it_shows_the_report_with_totals_and_a_stacked_bar(viewer_client):
    charged_fleet()
    resp = viewer_client.get("/costs/?group=team")
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
    job = charged_fleet()
    html = viewer_client.get("/costs/?group=job").content.decode()
    assert f'href="/jobs/{job.pk}"' in html and "idle (infra)" in html


def test_bad_parameters_are_named(viewer_client):
    resp = viewer_client.get("/costs/?group=planet")
    assert resp.status_code == 400 and "group must be one of team, job, node, day" in resp.content.decode()

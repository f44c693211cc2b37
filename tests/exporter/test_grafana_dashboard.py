"""grafana/yardstick.json: a dashboard on a Prometheus datasource variable whose every query names only
metrics that /metrics exposes."""

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT
from tests.exporter.conftest import charged_scene

DASHBOARD = ROOT / "grafana" / "yardstick.json"


def exposed_names(client, token):
    """Every sample name a scrape of a charged fleet has (counters as NAME_total)."""
    resp = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert resp.status_code == 200
    return {s.name for f in text_string_to_metric_families(resp.content.decode()) for s in f.samples}


def test_every_panel_queries_only_metrics_yardstick_exposes(client, db, scrape_token):
    charged_scene()
    exposed = exposed_names(client, scrape_token)
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 15
    named = set()
    for expr in exprs:
        names = set(re.findall(r"\byardstick_[a-z_]+\b", expr))
        assert names, expr
        assert names <= exposed, f"{expr}: {sorted(names - exposed)} not exposed"
        named |= names
    # What the fleet page shows: fleet power, utilization per device, burn rate, spend by team, jobs' figures.
    assert {"yardstick_fleet_power_watts", "yardstick_device_utilization_ratio",
            "yardstick_fleet_burn_rate_dollars_per_hour", "yardstick_team_spend_today_dollars",
            "yardstick_job_reward_mean", "yardstick_job_score_points", "yardstick_job_cost_dollars_total"} <= named


def test_it_reads_a_prometheus_datasource_chosen_on_import():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]

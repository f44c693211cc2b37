"""GET /metrics: who may scrape it, and that what it says is what the pages say, by a real Prometheus parser."""

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.conftest import SCRAPE_TOKEN, charged_scene, ended_job


def scrape(client, token):
    return client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")


def families(resp):
    """{family name: Metric} of a scrape, parsed by prometheus_client's text parser."""
    assert resp.status_code == 200, resp.content[:300]
    return {f.name: f for f in text_string_to_metric_families(resp.content.decode())}


def samples(family, sample_name=None, **labels):
    """{sorted labels: value} of the family's samples called `sample_name` (default: the family's name) whose
    labels include `labels`."""
    sample_name = sample_name or family.name
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())}


def one(family, sample_name=None, **labels):
    """The value of the one sample `samples` finds."""
    found = samples(family, sample_name, **labels)
    assert len(found) == 1, f"{sample_name or family.name} {labels}: {found}"
    return next(iter(found.values()))


# -- who may scrape ------------------------------------------------------------------------------------


def test_it_answers_401_without_credentials(client, db):
    resp = client.get("/metrics")
    assert resp.status_code == 401
    assert resp.json()["error"] == "authentication required"


def test_it_refuses_a_token_that_is_neither_an_api_token_nor_the_scrape_token(client, db, scrape_token):
    resp = scrape(client, "not-" + SCRAPE_TOKEN)
    assert resp.status_code == 401
    assert "invalid or revoked API token" in resp.json()["error"]


def test_it_refuses_a_user_without_the_viewer_role(client, outsider, api_token):
    resp = scrape(client, api_token(outsider))
    assert resp.status_code == 403
    assert "viewer role" in resp.json()["error"]


def test_a_viewer_token_scrapes_it(client, viewer, api_token):
    resp = scrape(client, api_token(viewer))
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "yardstick_fleet_power_watts" in families(resp)


def test_the_scrape_token_scrapes_it_and_opens_nothing_else(client, db, scrape_token):
    assert "yardstick_fleet_devices" in families(scrape(client, scrape_token))
    for path in ("/api/whoami", "/api/fleet", "/api/jobs"):
        assert scrape(client, scrape_token).status_code == 200
        resp = client.get(path, HTTP_AUTHORIZATION=f"Bearer {scrape_token}")
        assert resp.status_code == 401, path


def test_without_a_configured_scrape_token_no_token_is_one(client, db, settings):
    settings.METRICS_TOKEN = ""
    assert scrape(client, SCRAPE_TOKEN).status_code == 401


def test_it_answers_only_get(client, db, scrape_token):
    resp = client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {scrape_token}")
    assert resp.status_code == 405


# -- what it says ------------------------------------------------------------------------------------------


@pytest.fixture
def scene(db):
    return charged_scene()


def test_device_figures_are_the_newest_samples_in_base_units(client, scene, scrape_token):
    got = families(scrape(client, scrape_token))
    gpu0 = dict(node="gpu-a", device="0", model="NVIDIA H100 80GB HBM3", simulated="false", power_estimated="false")
    assert one(got["yardstick_device_power_watts"], **gpu0) == 412.5
    assert one(got["yardstick_device_utilization_ratio"], **gpu0) == pytest.approx(0.87)
    assert one(got["yardstick_device_memory_used_bytes"], **gpu0) == 20000 * 1024 * 1024
    assert one(got["yardstick_device_memory_total_bytes"], **gpu0) == 81559 * 1024 * 1024
    assert one(got["yardstick_device_temperature_celsius"], **gpu0) == 61.0
    assert one(got["yardstick_device_stale"], **gpu0) == 0
    assert 0 <= one(got["yardstick_device_sample_age_seconds"], **gpu0) < 60
    info = one(got["yardstick_device_info"], uuid="GPU-gpu-a-0", source="nvml", **gpu0)
    assert info == 1


def test_the_energy_counter_is_a_counter_and_absent_where_the_device_has_none(client, scene, scrape_token):
    energy = families(scrape(client, scrape_token))["yardstick_device_energy_joules"]
    assert energy.type == "counter"
    assert samples(energy, "yardstick_device_energy_joules_total") == {
        tuple(sorted(dict(node="gpu-a", device="0", model="NVIDIA H100 80GB HBM3", simulated="false",
                          power_estimated="false").items())): 123456.0}


def test_a_simulated_device_with_estimated_power_says_so_on_every_series(client, scene, scrape_token):
    got = families(scrape(client, scrape_token))
    assert one(got["yardstick_device_power_watts"], device="1") == 200.0
    for family in got.values():
        for s in family.samples:
            if s.labels.get("device") == "1":
                assert (s.labels["simulated"], s.labels["power_estimated"]) == ("true", "true"), s


def test_fleet_cards_are_the_fleet_pages(client, scene, scrape_token, viewer):
    got = families(scrape(client, scrape_token))
    client.force_login(viewer)
    page = client.get("/")
    cards = page.context["cards"]
    assert one(got["yardstick_fleet_power_watts"]) == pytest.approx(cards["power_kw"] * 1000) == 612.5
    assert one(got["yardstick_fleet_burn_rate_dollars_per_hour"]) == float(cards["burn_usd_per_h"]) > 0
    assert {s.labels["state"]: s.value for s in got["yardstick_fleet_devices"].samples} == {
        "busy": cards["busy"], "idle": cards["idle"], "stale": cards["stale"]} == {"busy": 1, "idle": 1, "stale": 0}


def test_a_device_gone_quiet_is_marked_stale_and_leaves_the_fleet_power(client, scene, scrape_token):
    from datetime import datetime, timedelta, timezone

    from tests.exporter.conftest import reading

    reading(scene["gpu1"], 200.0, 0.0, ts=datetime.now(timezone.utc) - timedelta(minutes=5))
    got = families(scrape(client, scrape_token))
    assert one(got["yardstick_device_stale"], device="1") == 1
    assert one(got["yardstick_device_sample_age_seconds"], device="1") >= 300
    assert one(got["yardstick_fleet_power_watts"]) == 412.5


def test_job_figures_are_the_job_apis(client, scene, scrape_token, viewer, api_token):
    job = scene["job"]
    got = families(scrape(client, scrape_token))
    shown = client.get(f"/api/jobs/{job.pk}", HTTP_AUTHORIZATION=f"Bearer {api_token(viewer)}").json()
    labels = dict(job=str(job.pk), team="research")
    cost = got["yardstick_job_cost_dollars"]
    assert cost.type == "counter"
    assert one(cost, "yardstick_job_cost_dollars_total", **labels) == float(shown["money"]["cost_usd"]) > 0
    assert one(got["yardstick_job_ipd_points_per_dollar"], **labels) == shown["money"]["points_per_usd"]
    assert one(got["yardstick_job_status"], status="running", **labels) == 1
    assert one(got["yardstick_job_steps"], **labels) == shown["steps_done"] == 10
    assert one(got["yardstick_job_steps_planned"], **labels) == shown["steps"] == 100
    assert one(got["yardstick_job_reward_mean"], **labels) == pytest.approx(shown["latest_reward_mean"])
    assert one(got["yardstick_job_score_points"], **labels) == shown["latest_pass1"]
    intel = client.get(f"/api/costs/jobs/{job.pk}", HTTP_AUTHORIZATION=f"Bearer {api_token(viewer)}").json()
    assert one(got["yardstick_job_dollars_per_million_rollout_tokens"], **labels) == float(
        intel["usd_per_million_tokens"])
    assert one(got["yardstick_job_info"], name="grpo", env="arithmetic", **labels) == 1


def test_label_values_are_escaped_so_a_parser_reads_them_back(client, db, scrape_token):
    from tests.dashboard import builders as b

    name = 'say "hi" \\ then\nstop'
    job = b.job(name=name, team='r&d "core"')
    info = families(scrape(client, scrape_token))["yardstick_job_info"]
    assert one(info, job=str(job.pk), name=name, team='r&d "core"') == 1


def test_an_ended_job_is_kept_a_day_then_dropped(client, db, scrape_token):
    from exporter.metrics import FINISHED_JOB_KEPT_S

    assert FINISHED_JOB_KEPT_S == 24 * 3600
    recent, old = ended_job("recent", hours_ago=1), ended_job("old", hours_ago=25)
    status = families(scrape(client, scrape_token))["yardstick_job_status"]
    jobs = {s.labels["job"]: s.labels["status"] for s in status.samples}
    assert jobs == {str(recent.pk): "completed"}
    assert str(old.pk) not in jobs


def test_team_spend_today_is_the_cost_reports(client, scene, scrape_token, viewer, api_token):
    from datetime import datetime, timezone

    got = families(scrape(client, scrape_token))
    today = datetime.now(timezone.utc).date().isoformat()
    table = client.get(f"/api/costs?group=team&from={today}",
                       HTTP_AUTHORIZATION=f"Bearer {api_token(viewer)}").json()
    rows = {r["team"]: r for r in table["rows"]}
    assert set(rows) == {"infra", "research"}
    for team, row in rows.items():
        assert one(got["yardstick_team_spend_today_dollars"], team=team) == float(row["total_usd"])
        assert one(got["yardstick_team_idle_spend_today_dollars"], team=team) == float(row["idle_usd"])
    assert one(got["yardstick_fleet_spend_today_dollars"]) == pytest.approx(float(table["totals"]["fleet_exact_usd"]))


# A name ends in its base unit, or says what it counts (a 0/1 flag, a status, an info series).
ENDINGS = ("watts", "ratio", "bytes", "celsius", "seconds", "joules", "dollars", "points", "dollar", "tokens",
           "hour", "mean", "devices", "status", "steps", "planned", "stale", "info")


def test_every_name_follows_prometheus_naming(client, scene, scrape_token):
    got = families(scrape(client, scrape_token))
    assert len(got) >= 25
    for name, family in got.items():
        assert re.fullmatch(r"yardstick_[a-z][a-z_]*[a-z]", name), name
        assert family.documentation, name
        for s in family.samples:
            if family.type == "counter":
                assert s.name == name + "_total", s
            else:
                assert not s.name.endswith("_total"), s
        assert name.split("_")[-1] in ENDINGS, name


def test_the_warm_task_keeps_spend_and_money_cached_so_a_scrape_computes_neither(client, scene, scrape_token,
                                                                                  monkeypatch):
    from django.core.cache import cache
    from django.utils import timezone

    from exporter import metrics
    from exporter.tasks import warm

    for key in metrics.cache_keys(timezone.now().date()).values():
        cache.delete(key)
    assert warm()["jobs"] == len(metrics.exported_jobs(timezone.now())) > 0
    before = families(scrape(client, scrape_token))

    def computed(*args, **kwargs):
        raise AssertionError("a scrape after the warm task computed money or spend")

    monkeypatch.setattr(metrics, "jobs_money", computed)
    monkeypatch.setattr(metrics.report, "build", computed)
    after = families(scrape(client, scrape_token))
    for name in ("yardstick_job_cost_dollars", "yardstick_team_spend_today_dollars"):
        assert samples(after[name]) == samples(before[name]) != []

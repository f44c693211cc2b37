"""The real Prometheus (Debian's /usr/bin/prometheus, `make prometheus`) scrapes a running Yardstick with the
scrape token, and its query API answers the device power and the job cost that Yardstick's API shows."""

import json
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request

import pytest

from tests.conftest import free_port
from tests.exporter.conftest import charged_scene
from tests.waiting import wait_for

PROMETHEUS = "/usr/bin/prometheus"


def prometheus_config(target, token):
    """A scrape config as the README gives it: every second, the scrape token, Yardstick's own `job` label kept."""
    return (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: yardstick\n    honor_labels: true\n    metrics_path: /metrics\n"
        f"    authorization:\n      credentials: {json.dumps(token)}\n"
        f"    static_configs:\n      - targets: [{json.dumps(target)}]\n"
    )


@pytest.fixture
def prometheus(tmp_path, live_server, scrape_token):
    """A Prometheus server scraping `live_server` every second; killed afterwards."""
    if not shutil.which(PROMETHEUS):
        pytest.fail(f"{PROMETHEUS} is missing: run 'make prometheus' (or 'sudo apt-get install prometheus')")
    target = live_server.url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config(target, scrape_token))
    port = free_port()
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield {"url": f"http://127.0.0.1:{port}", "log": log}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def query(prom, promql):
    """The instant vector Prometheus answers for `promql`: [(labels, float value)], [] before any scrape."""
    url = f"{prom['url']}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            body = json.load(resp)
    except OSError:  # not listening yet
        return []
    assert body["status"] == "success", body
    return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]


def test_prometheus_scrapes_the_device_power_and_the_job_cost_yardstick_shows(
        transactional_db, live_server, prometheus, viewer, api_token, client):
    scene = charged_scene()
    job = scene["job"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_token(viewer)}"}
    fleet = client.get("/api/fleet", **auth).json()
    shown_power = {d["uuid"]: d["latest"]["power_w"] for n in fleet["nodes"] for d in n["devices"]}
    shown_cost = client.get(f"/api/jobs/{job.pk}", **auth).json()["money"]["cost_usd"]

    power = wait_for(lambda: query(prometheus, 'yardstick_device_power_watts{node="gpu-a",device="0"}'),
                     timeout_s=15, what="Prometheus to have scraped the device power", logs=[prometheus["log"]])
    cost = wait_for(lambda: query(prometheus, f'yardstick_job_cost_dollars_total{{job="{job.pk}"}}'),
                    timeout_s=5, what="Prometheus to have scraped the job cost", logs=[prometheus["log"]])

    (labels, watts), = power
    assert watts == shown_power["GPU-gpu-a-0"] == 412.5
    assert labels["simulated"] == "false"
    (labels, dollars), = cost
    assert labels["team"] == "research"
    assert dollars == float(shown_cost) > 0
    up, = query(prometheus, 'up{job="yardstick"}')
    assert up[1] == 1.0
    simulated, = query(prometheus, 'yardstick_device_power_watts{simulated="true"}')
    assert simulated[0]["device"] == "1"

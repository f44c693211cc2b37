"""The node page: per-device series at the resolution the range calls for."""

import json
from datetime import datetime, timedelta, timezone

from tests.dashboard import builders as b

UTC = timezone.utc


def test_it_reads_raw_samples_for_an_hour_and_rollups_for_a_day(viewer_client):
    n = b.node("gpu-a", team="research")
    d0, d1 = b.device(n, 0), b.device(n, 1, source="sim", simulated=True)
    now = datetime.now(UTC)
    b.samples(d0, now - timedelta(minutes=30), 60, every_s=10, util_pct=70)
    b.samples(d1, now - timedelta(minutes=30), 60, every_s=10, util_pct=20)
    b.minutes(d0, b.floor_minute(now) - timedelta(hours=3), 30, util_pct=65)

    resp = viewer_client.get("/nodes/gpu-a?range=1h")
    assert resp.status_code == 200
    figs = json.loads(resp.context["figures_json"])
    assert set(figs) == {"util", "sm", "power", "temp", "mem"}
    util = figs["util"]
    assert [t["name"] for t in util["data"]] == ["GPU 0", "GPU 1 (sim)"]
    assert len(util["data"][0]["y"]) == 60 and util["data"][0]["y"][0] == 70
    assert "raw samples" in util["layout"]["title"]["text"]
    assert resp.context["topics"] == f"node.{n.pk}", "raw and following now: live"
    assert "◇ simulated" in resp.content.decode()

    day = json.loads(viewer_client.get("/nodes/gpu-a?range=24h").context["figures_json"])
    assert "1-minute rollups" in day["util"]["layout"]["title"]["text"]
    assert day["util"]["data"][0]["y"] == [65] * 30


def test_a_custom_range_is_fixed_and_not_live(viewer_client):
    b.node("gpu-a")
    resp = viewer_client.get("/nodes/gpu-a?from=2025-01-01T00:00&to=2025-01-01T00:30")
    assert resp.status_code == 200
    assert resp.context["tr"].key == "custom" and resp.context["topics"] == ""
    bad = viewer_client.get("/nodes/gpu-a?from=2025-01-02T00:00&to=2025-01-01T00:00")
    assert bad.status_code == 400 and "from must be before to" in bad.content.decode()
    edge = viewer_client.get("/nodes/gpu-a?from=9999-12-30T00:00&to=9999-12-31T00:00")
    assert edge.status_code == 400 and "from must be a time from 1970-01-01 to 2100-01-01" in edge.content.decode()


def test_a_nul_in_the_node_name_is_a_400_naming_it(viewer_client):
    # PostgreSQL cannot store or compare NUL in text: /nodes/%00 was a DataError (500).
    resp = viewer_client.get("/nodes/%00")
    assert resp.status_code == 400
    assert "name contains a NUL (U+0000) character; it must be text without" in resp.content.decode()
    assert "<title>Bad request" in resp.content.decode(), "the site's page, with its way back"


def test_an_unknown_node_is_404(viewer_client):
    assert viewer_client.get("/nodes/nope").status_code == 404


def test_a_live_page_starts_connecting_and_a_paused_one_says_paused(viewer_client):
    n = b.node("gpu-a")
    live = viewer_client.get("/nodes/gpu-a?range=15m").content.decode()
    assert f'data-topics="node.{n.pk}"' in live
    assert 'aria-pressed="true"' in live and 'data-state="connecting"' in live
    paused = viewer_client.get("/nodes/gpu-a?range=15m&live=0").content.decode()
    assert 'data-topics=""' in paused and 'aria-pressed="false"' in paused and 'data-state="paused"' in paused


def test_a_cpu_is_named_cpu_in_the_device_table_and_charts(viewer_client):
    n = b.node("laptop")
    cpu = b.device(n, 0, model="AMD EPYC 7B13", source="host", power_estimated=True, uuid="CPU-laptop")
    b.samples(cpu, datetime.now(UTC) - timedelta(minutes=5), 10, every_s=10, util_pct=30)

    resp = viewer_client.get("/nodes/laptop?range=1h")
    html = resp.content.decode()
    assert '<th scope="row">CPU</th>' in html and "GPU 0" not in html
    figs = json.loads(resp.context["figures_json"])
    assert figs["util"]["data"][0]["name"] == "CPU"


def test_an_admin_sets_the_owner_from_the_node_page(client, admin_user):

    n = b.node("gpu-a", team="research")
    client.force_login(admin_user)
    page = client.get("/nodes/gpu-a").content.decode()
    assert 'id="owner-form"' in page and 'value="research"' in page

    resp = client.post("/nodes/gpu-a/owner", {"team": "  infra "}, follow=True)
    assert resp.redirect_chain[-1][0] == "/nodes/gpu-a"
    n.refresh_from_db()
    assert n.owner == "infra"
    assert "now owned by team &#x27;infra&#x27;" in resp.content.decode()

    cleared = client.post("/nodes/gpu-a/owner", {"team": ""}, follow=True)
    n.refresh_from_db()
    assert n.owner is None and "team" not in n.labels
    assert "charged to &#x27;unassigned&#x27;" in cleared.content.decode()


def test_a_bad_owner_is_refused_with_a_reason_and_nothing_stored(client, admin_user):

    n = b.node("gpu-a", team="research")
    client.force_login(admin_user)
    resp = client.post("/nodes/gpu-a/owner", {"team": "t" * 101}, follow=True)
    assert "Owner not changed: owner team must be at most 100 characters, got 101" in resp.content.decode()
    resp = client.post("/nodes/gpu-a/owner", {"team": "line\nbreak"}, follow=True)
    assert "owner team must be printable text" in resp.content.decode()
    n.refresh_from_db()
    assert n.owner == "research"


def test_only_an_admin_sees_or_may_use_the_owner_form(client, viewer, operator):

    n = b.node("gpu-a", team="research")
    for user in (viewer, operator):
        client.force_login(user)
        assert 'id="owner-form"' not in client.get("/nodes/gpu-a").content.decode()
        assert client.post("/nodes/gpu-a/owner", {"team": "mine"}).status_code == 403
    n.refresh_from_db()
    assert n.owner == "research"
    client.logout()
    assert client.post("/nodes/gpu-a/owner", {"team": "mine"}).status_code == 302, "to the login page"
    n.refresh_from_db()
    assert n.owner == "research"


def test_the_owner_form_needs_its_csrf_token(admin_user):
    from django.test import Client

    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(admin_user)
    b.node("gpu-a", team="research")
    assert csrf_client.post("/nodes/gpu-a/owner", {"team": "x"}).status_code == 403


def test_unknown_pages_get_the_site_layout_and_a_way_back(viewer_client):
    b.node("gpu-a")
    for path in ("/jobs/999999", "/nodes/nonexistent", "/jobs/abc", "/no/such/page"):
        resp = viewer_client.get(path)
        html = resp.content.decode()
        assert resp.status_code == 404, path
        assert '<header class="top">' in html and 'aria-label="Main"' in html, path
        assert "Not found" in html and '<a href="/">the fleet</a>' in html and '<a href="/jobs">' in html, path
        assert 'rel="icon"' in html


def test_the_favicon_is_served(viewer_client, client):
    page = viewer_client.get("/").content.decode()
    assert '<link rel="icon" href="/static/yardstick/favicon.svg"' in page
    resp = viewer_client.get("/favicon.ico")
    assert resp.status_code == 301 and resp["Location"] == "/static/yardstick/favicon.svg"


def test_a_node_named_with_a_slash_is_listed_linked_and_owned_like_any_other(client, admin_user):

    n = b.node("rack-1/gpu-a", team="research")
    b.latest(b.device(n, 0), util_pct=50, power_w=300)
    client.force_login(admin_user)

    fleet = client.get("/")
    assert fleet.status_code == 200
    assert 'href="/nodes/rack-1/gpu-a"' in fleet.content.decode()
    page = client.get("/nodes/rack-1/gpu-a")
    assert page.status_code == 200 and page.context["node"].name == "rack-1/gpu-a"
    assert 'action="/nodes/rack-1/gpu-a/owner"' in page.content.decode()

    resp = client.post("/nodes/rack-1/gpu-a/owner", {"team": "infra"}, follow=True)
    assert resp.redirect_chain[-1][0] == "/nodes/rack-1/gpu-a"
    n.refresh_from_db()
    assert n.owner == "infra"


def test_a_rubin_superchip_node_shows_its_architecture_scopes_tensor_activity_module_power_and_nvlink(viewer_client):
    """Written by the real NVML source (over the fake pynvml's Rubin profile) and the agent's writer."""
    import sys
    from pathlib import Path

    from django.db import connection

    from collector.agent.batch import Batch
    from collector.agent.sources.nvml import NvmlSource
    from collector.agent.writer import Writer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collector"))
    import fake_pynvml
    from fake_pynvml import FakeGpu, FakeNvml

    gpu = FakeGpu.rubin_superchip("GPU-vr-0")
    source = NvmlSource("vr-node", nvml=FakeNvml([gpu]))
    now = datetime.now(UTC).replace(microsecond=0)
    writer = Writer(connection.connection)
    for i in range(3):
        readings = source.read(now)
        writer.write(Batch([r.device for r in readings], [(r.device.uuid, now - timedelta(seconds=3 - i), *r.values)
                                                          for r in readings]))
        gpu.clock_us += 1_000_000
        gpu.nvlink_tx_kib += 1024
        gpu.nvlink_rx_kib += 512
        gpu.clocks_event_reasons = fake_pynvml.nvmlClocksEventReasonSwPowerCap
    b.samples(b.device(b.node("old-node"), 0, model="NVIDIA A100-SXM4-80GB"), now - timedelta(minutes=5), 10)

    resp = viewer_client.get("/nodes/vr-node?range=1h")
    html = resp.content.decode()
    assert "rubin" in html and "power measured for: GPU, module, memory" in html
    figs = json.loads(resp.context["figures_json"])
    assert {"tensor", "occupancy", "module_power", "nvlink_tx", "nvlink_rx", "throttle"} <= set(figs)
    power_cap, thermal, sync_boost, hw_slowdown = figs["throttle"]["data"]
    assert power_cap["name"] == "power cap"
    assert power_cap["y"] == [None] + ["GPU 0 · power cap"] * 2, "held down from the second read"
    assert power_cap["text"] == ["0% of samples"] + ["100% of samples"] * 2
    assert thermal["y"] == sync_boost["y"] == hw_slowdown["y"] == [None] * 3, "the rows are there, unmarked"
    assert figs["throttle"]["layout"]["yaxis"]["categoryarray"] == [
        "GPU 0 · power cap", "GPU 0 · thermal", "GPU 0 · sync boost", "GPU 0 · HW slowdown"]
    limit = [t for t in figs["power"]["data"] if t["name"] == "GPU 0 power limit"]
    assert limit and limit[0]["y"] == [gpu.power_limit_mw / 1000] * 3, "the enforced limit, dotted beside the power"
    assert figs["tensor"]["data"][0]["y"] == [None, 62.0, 62.0], "GPM needs two samples"
    assert figs["module_power"]["data"][0]["y"] == [1900.0] * 3
    assert figs["nvlink_tx"]["data"][0]["y"] == [None, 1048576.0, 1048576.0]
    # A node whose devices report none of it has no empty charts about it.
    assert set(json.loads(viewer_client.get("/nodes/old-node?range=1h").context["figures_json"])) == {
        "util", "sm", "power", "temp", "mem"}


def test_the_node_page_lists_health_events_and_marks_a_device_with_a_critical_one_unhealthy(viewer_client):
    from collector.models import DeviceEvent

    n = b.node("gpu-sick")
    sick, fine = b.device(n, 0), b.device(n, 1)
    now = datetime.now(UTC)
    DeviceEvent.objects.create(device=sick, ts=now - timedelta(minutes=5), kind="ecc_uncorrected", code=2,
                               detail="2 more uncorrected ECC errors (2 since the driver loaded)", critical=True)
    DeviceEvent.objects.create(device=fine, ts=now - timedelta(days=2), kind="xid", code=79, detail="XID 79",
                               critical=True)  # two days ago: no longer unhealthy

    html = viewer_client.get("/nodes/gpu-sick?range=1h").content.decode()
    assert html.count("✗ unhealthy") == 1
    assert "2 more uncorrected ECC errors (2 since the driver loaded)" in html and "XID 79" in html
    assert "No health events" not in viewer_client.get("/nodes/gpu-sick").content.decode()
    b.device(b.node("calm"), 0)
    assert "No health events reported." in viewer_client.get("/nodes/calm").content.decode()


def test_a_week_of_a_two_gpu_node_shows_why_clocks_were_held_down_the_power_limit_and_the_nodes_nvlink_total(
        viewer_client):
    """Over a range drawn from 1-minute rollups: each device's share of samples held down by each reason, the lowest
    power limit enforced, and the NVLink throughput of both GPUs summed. Written by the real NVML source (over the
    fake pynvml's Hopper profile), the agent's writer and the roll-up."""
    import sys
    from pathlib import Path

    from django.db import connection

    from collector import store
    from collector.agent.batch import Batch
    from collector.agent.sources.nvml import NvmlSource
    from collector.agent.writer import Writer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collector"))
    import fake_pynvml
    from fake_pynvml import FakeGpu, FakeNvml

    gpus = [FakeGpu.hopper("GPU-h-0"), FakeGpu.hopper("GPU-h-1")]
    source = NvmlSource("hgx-node", nvml=FakeNvml(gpus))
    minute = (datetime.now(UTC) - timedelta(minutes=10)).replace(second=0, microsecond=0)
    writer = Writer(connection.connection)
    for i in range(5):  # five samples 10 s apart in one minute
        ts = minute + timedelta(seconds=10 * i)
        readings = source.read(ts)
        writer.write(Batch([r.device for r in readings], [(r.device.uuid, ts, *r.values) for r in readings]))
        for g in gpus:
            g.clock_us += 10_000_000
            g.nvlink_tx_kib += 10 * 1024  # 10 MiB in 10 s: 1 MiB/s each
            g.nvlink_rx_kib += 10 * 512
        # GPU 0: capped by power from the second sample; GPU 1: held down by heat for the last two only.
        gpus[0].clocks_event_reasons = fake_pynvml.nvmlClocksEventReasonSwPowerCap
        gpus[0].power_limit_mw = 500_000 if i >= 2 else 700_000
        if i >= 2:
            gpus[1].clocks_event_reasons = (fake_pynvml.nvmlClocksEventReasonSwThermalSlowdown
                                            | fake_pynvml.nvmlClocksEventReasonHwSlowdown)
    store.roll_up()

    resp = viewer_client.get("/nodes/hgx-node?range=24h")
    assert resp.context["tr"].resolution == "1m"
    figs = json.loads(resp.context["figures_json"])
    rows = {row: t["text"] for t in figs["throttle"]["data"] for row in t["y"] if row}
    assert rows == {"GPU 0 · power cap": ["80% of samples"],  # 4 of 5
                    "GPU 1 · thermal": ["40% of samples"], "GPU 1 · HW slowdown": ["40% of samples"]}
    assert len(figs["throttle"]["layout"]["yaxis"]["categoryarray"]) == 8, "four rows a device, marked or not"
    limits = {t["name"]: t["y"] for t in figs["power"]["data"] if t["name"].endswith("power limit")}
    assert limits == {"GPU 0 power limit": [500.0], "GPU 1 power limit": [700.0]}, "the lowest in the minute"
    for key, per_gpu in (("nvlink_tx", 1024 * 1024), ("nvlink_rx", 512 * 1024)):
        traces = {t["name"]: t["y"] for t in figs[key]["data"]}
        assert traces["GPU 0"] == traces["GPU 1"] == [per_gpu]
        assert traces["node total"] == [2 * per_gpu]
        assert figs[key]["live"]["traces"][-1] == {"trace": 2, "devices": ["GPU-h-0", "GPU-h-1"],
                                                   "y": {"key": f"{key}_bytes_s"}}


def test_a_node_named_with_a_trailing_slash_is_listed_and_opens_and_a_slash_after_another_redirects(viewer_client):
    from tests.dashboard import builders as b

    odd, plain = b.node("rack-1/"), b.node("gpu-b")
    b.device(odd, 0)
    b.device(plain, 0)
    fleet = viewer_client.get("/")
    assert fleet.status_code == 200 and 'href="/nodes/rack-1/"' in fleet.content.decode()
    page = viewer_client.get("/nodes/rack-1/")
    assert page.status_code == 200 and page.context["node"] == odd
    moved = viewer_client.get("/nodes/gpu-b/?range=1h")
    assert (moved.status_code, moved["Location"]) == (301, "/nodes/gpu-b?range=1h")
    assert viewer_client.get("/nodes/nothing/", follow=True).status_code == 404

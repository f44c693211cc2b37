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


def test_an_unknown_node_is_404(viewer_client):
    assert viewer_client.get("/nodes/nope").status_code == 404


def test_a_live_page_starts_connecting_and_a_paused_one_says_paused(viewer_client):
    n = b.node("gpu-a")
    live = viewer_client.get("/nodes/gpu-a?range=15m").content.decode()
    assert f'data-topics="node.{n.pk}"' in live
    assert 'aria-pressed="true"' in live and 'data-state="connecting"' in live
    paused = viewer_client.get("/nodes/gpu-a?range=15m&live=0").content.decode()
    assert 'data-topics=""' in paused and 'aria-pressed="false"' in paused and 'data-state="paused"' in paused

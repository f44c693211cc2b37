"""The fleet page: cards, heatmap, node table, honest badges, the range picker."""

import gzip
from datetime import datetime, timedelta, timezone

from tests.dashboard import builders as b

UTC = timezone.utc


def test_it_counts_busy_idle_and_stale_devices_and_shows_power_and_burn(viewer_client):
    now = datetime.now(UTC)
    b.prices(per_hour="2.00", per_kwh="0.10", pue="1.5")
    n1 = b.node("gpu-a", team="research", interval_s=30)
    busy = b.device(n1, 0)
    idle = b.device(n1, 1)
    b.latest(busy, util_pct=90, power_w=600, ts=now)
    b.latest(idle, util_pct=2, power_w=100, ts=now)
    n2 = b.node("gpu-b", interval_s=30)
    b.latest(b.device(n2, 0), util_pct=80, power_w=500, ts=now - timedelta(minutes=5))

    resp = viewer_client.get("/")
    assert resp.status_code == 200
    cards = resp.context["cards"]
    assert (cards["busy"], cards["idle"], cards["stale"]) == (1, 1, 1)
    assert cards["power_kw"] == 0.7, "stale devices draw nothing we know of"
    # 2 fresh devices x $2/h + 0.7 kW x $0.10/kWh x PUE 1.5 = $4.105 → $4.11 (half up)
    assert str(cards["burn_usd_per_h"]) == "4.11"
    html = resp.content.decode()
    assert 'href="/nodes/gpu-a"' in html and "stale" in html
    assert '<script id="figures" type="application/json">' in html


def test_simulated_devices_carry_a_badge(viewer_client):
    n = b.node("sim-0")
    b.latest(b.device(n, 0, source="sim", simulated=True), util_pct=50, power_w=300)
    html = viewer_client.get("/").content.decode()
    assert "1 simulated device" in html
    assert "◇ simulated" in html, "the node's row says so too"


def test_the_range_lives_in_the_url_and_a_bad_one_is_named(viewer_client):
    resp = viewer_client.get("/?range=6h&live=0")
    assert resp.status_code == 200
    assert resp.context["tr"].key == "6h" and resp.context["tr"].live is False
    assert resp.context["topics"] == "", "paused: the page subscribes to nothing"
    bad = viewer_client.get("/?range=3w")
    assert bad.status_code == 400
    assert "range must be one of 15m, 1h, 6h, 24h, 7d" in bad.content.decode()


def test_fleet_power_sums_the_rollups_of_the_range(viewer_client):
    n = b.node("gpu-a")
    start = b.floor_minute(datetime.now(UTC)) - timedelta(minutes=10)
    b.minutes(b.device(n, 0), start, 5, power_w=300)
    b.minutes(b.device(n, 1), start, 5, power_w=500)
    resp = viewer_client.get("/?range=1h")
    import json

    figs = json.loads(resp.context["figures_json"])
    assert figs["power"]["data"][0]["y"] == [0.8] * 5


def test_an_anonymous_visitor_is_sent_to_log_in(client):
    resp = client.get("/")
    assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")


def test_plotly_js_comes_from_the_installed_package(viewer_client):
    import plotly

    html = viewer_client.get("/").content.decode()
    src = f"/assets/plotly-{plotly.__version__}.min.js"
    assert src in html and "cdn" not in html.lower()
    resp = viewer_client.get(src)
    assert resp.status_code == 200 and "immutable" in resp["Cache-Control"]
    plain = b"".join(resp.streaming_content)
    assert b"plotly" in plain[:2000].lower() and "Content-Encoding" not in resp
    # A browser that takes gzip gets the same file in under a third of the bytes.
    resp = viewer_client.get(src, HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert resp["Content-Encoding"] == "gzip" and "Accept-Encoding" in resp["Vary"]
    assert gzip.decompress(resp.content) == plain and len(resp.content) < len(plain) / 3


def test_the_one_query_fleet_read_agrees_with_the_collectors_models(db):
    from collector import store
    from collector.models import Device, Node

    now = datetime.now(UTC)
    n1 = b.node("gpu-a", team="research", interval_s=2.0)
    b.latest(b.device(n1, 0), util_pct=90, power_w=600, ts=now - timedelta(seconds=5))
    b.device(n1, 1)  # never reported
    b.latest(b.device(b.node("gpu-b"), 0), util_pct=1, power_w=50, ts=now - timedelta(seconds=10))
    b.node("empty")
    ours = store.fleet(now)  # what the page and the API show (collector.store.latest_rows)
    theirs = []  # the same, read through the ORM's model instances
    for node in Node.objects.order_by("name"):
        devices = list(Device.objects.filter(node=node).select_related("latest").order_by("index"))
        latest = [getattr(d, "latest", None) for d in devices]
        theirs.append(node.to_dict([{**d.to_dict(), "latest": s and s.to_dict()} for d, s in zip(devices, latest)],
                                   max((s.ts for s in latest if s), default=None), now))
    assert ours == theirs
    assert [(n["name"], n["status"]) for n in ours] == [("empty", "stale"), ("gpu-a", "ok"), ("gpu-b", "stale")]
    assert [(n["name"], n["owner"], n["status"], n["newest_sample_at"]) for n in ours] == \
        [(n["name"], n["owner"], n["status"], n["newest_sample_at"]) for n in theirs]
    for a, c in zip(ours, theirs):
        assert [(d["uuid"], d["index"], d["simulated"], d["latest"] and d["latest"]["util_pct"]) for d in a["devices"]] == \
            [(d["uuid"], d["index"], d["simulated"], d["latest"] and d["latest"]["util_pct"]) for d in c["devices"]]


def test_the_ipd_card_gives_each_environment_its_jobs_gain_over_their_cost_with_idle_apart(viewer_client):
    # $6/h: $0.10 a device-minute, energy free. The job holds one GPU for the last minutes of today; the
    # other GPU idles. Its environment's IPD is its 6 points over its own cost, never over the idle too.
    b.prices(per_hour="6.00", per_kwh="0", pue="1")
    n = b.node("gpu-a", team="infra")
    held, idle = b.device(n, 0), b.device(n, 1)
    start, count, end = b.minutes_of_today()
    b.minutes(held, start, count)
    b.minutes(idle, start, count)
    job = b.job(name="today", team="research")
    b.stint(job, held, start)
    from trainer.models import Step

    Step.objects.create(job=job, step=0, at=start + timedelta(seconds=1), eval_pass1=30.0, metrics={})
    Step.objects.create(job=job, step=10, at=end - timedelta(seconds=1), eval_pass1=36.0, metrics={})
    b.attribute(end + timedelta(seconds=1))

    html = viewer_client.get("/").content.decode()

    from costs.money import ipd_text

    jobs_usd = 0.10 * count
    assert f'<div data-env="arithmetic">arithmetic {ipd_text(6 / jobs_usd)} pts/$</div>' in html
    assert f'jobs <span id="card-attributed-usd">${jobs_usd:.2f}</span> + idle <span id="card-idle-usd">' \
           f'${jobs_usd:.2f}</span> = <span id="card-fleet-usd">${2 * jobs_usd:.2f}</span>' in html
    assert '<abbr title="intelligence per dollar: eval points gained over' in html, "spelled out where it appears"


def test_the_layout_the_page_starts_from_keeps_names_and_labels_as_text(viewer_client):
    import json
    import re

    from dashboard import fleetstate

    odd = "gpu</script><script>alert(1)</script>&"
    n = b.node(odd, team="r&d <x>")
    b.latest(b.device(n, 0), util_pct=50, power_w=300)

    page = viewer_client.get("/").content.decode()

    assert "<script>alert(1)" not in page
    start = json.loads(re.search(r'<script id="fleet-start" type="application/json">(.*?)</script>', page, re.S)[1])
    assert start["layout"]["nodes"][0][:2] == [odd, {"team": "r&d <x>"}]
    assert start["layout"] == json.loads(fleetstate.read_layout().data_json)
    assert start["frame"]  # the frame, base64

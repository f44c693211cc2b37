"""The fleet page and /api/fleet mark a device that reported a critical health event in the last day unhealthy,
count it on a card that follows live, and read the events in one query whatever the number of devices."""

import base64
import json
from datetime import datetime, timedelta, timezone

import numpy as np
from django.db import connection
from django.test.utils import CaptureQueriesContext

from collector.agent.batch import Batch, DeviceInfo
from collector.agent.sources.nvml import CRITICAL_XIDS
from collector.agent.writer import Writer
from collector.models import Device, DeviceEvent
from dashboard import broadcast, fleetstate
from tests.dashboard import builders as b

UTC = timezone.utc


def xid(device, xid_code, ts):
    """A device's XID as the NVML source reports it (critical or not by CRITICAL_XIDS)."""
    DeviceEvent.objects.create(device=device, ts=ts, kind="xid", code=xid_code, detail=f"XID {xid_code}",
                               critical=xid_code in CRITICAL_XIDS)


def why_unhealthy(resp, node, index):
    """What the frame the page starts from says of a device's health ("" when healthy): its heatmap cell's words."""
    start = json.loads(resp.context["fleet_start"])  # the page's #fleet-start text
    layout = start["layout"]
    at = next(i for i, (nd, ix) in enumerate(zip(layout["node"], layout["index"]))
              if layout["nodes"][nd][0] == node and ix == index)
    _, header, devices = fleetstate.decode(base64.b64decode(start["frame"]))
    assert bool(devices[at][1] & fleetstate.UNHEALTHY) == (str(at) in header["unhealthy"])
    return header["unhealthy"].get(str(at), "")


def test_the_fleet_page_marks_and_counts_the_devices_with_a_critical_event_in_the_last_day(viewer_client):
    now = datetime.now(UTC)
    n = b.node("gpu-a", interval_s=30)
    sick, noisy, healed, fine = (b.device(n, i) for i in range(4))
    for d in (sick, noisy, healed, fine):
        b.latest(d, util_pct=90, power_w=600, ts=now)
    xid(sick, 79, now - timedelta(minutes=5))  # fallen off the bus: critical
    xid(noisy, 13, now - timedelta(minutes=5))  # a graphics engine exception: the job's fault, not the GPU's
    xid(healed, 48, now - timedelta(hours=25))  # critical, but more than a day ago
    gone = b.device(b.node("gpu-b", interval_s=30), 0)  # never reported since its critical event: stale, still sick
    DeviceEvent.objects.create(device=gone, ts=now - timedelta(hours=1), kind="row_remap_failure", code=1,
                               detail="row remapping failed", critical=True)

    resp = viewer_client.get("/")

    cards = resp.context["cards"]
    assert (cards["busy"], cards["stale"], cards["unhealthy"]) == (4, 1, 2), "a stale device can be unhealthy too"
    html = resp.content.decode()
    assert '<div class="stat-value" id="card-unhealthy">2</div>' in html
    assert html.count("✗ unhealthy (") == 2
    at = (now - timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M")
    assert f'title="XID 79 at {at}' in html and "✗ unhealthy (GPU 0)" in html
    assert 'title="row remapping failed at' in html
    assert "XID 13" not in html and "XID 48" not in html
    assert why_unhealthy(resp, "gpu-a", 0).startswith("XID 79 at " + at)
    assert why_unhealthy(resp, "gpu-b", 0).startswith("row remapping failed at ")
    assert [bool(why_unhealthy(resp, "gpu-a", i)) for i in range(4)] == [True, False, False, False]


def test_a_fleet_with_none_shows_zero_and_no_warning(viewer_client):
    b.latest(b.device(b.node("gpu-a"), 0), util_pct=90, power_w=600)
    html = viewer_client.get("/").content.decode()
    assert '<div class="card stat"><div class="stat-label">Unhealthy devices</div><div class="stat-value" ' \
           'id="card-unhealthy">0</div>' in html
    assert "✗ unhealthy" not in html


def test_the_page_and_the_api_read_the_events_of_every_device_in_one_query(viewer_client):
    now = datetime.now(UTC)
    for i in range(5):
        n = b.node(f"gpu-{i}")
        for j in range(4):
            d = b.device(n, j)
            b.latest(d, util_pct=50, power_w=300, ts=now)
            xid(d, 79, now - timedelta(minutes=j))
    for path in ("/", "/api/fleet"):
        with CaptureQueriesContext(connection) as queries:
            assert viewer_client.get(path).status_code == 200
        reads = [q["sql"] for q in queries if "telemetry_device_event" in q["sql"]]
        assert len(reads) == 1, (path, reads)
    assert viewer_client.get("/").context["cards"]["unhealthy"] == 20


def test_the_live_cards_count_them_and_a_frame_goes_out_when_a_device_turns_unhealthy_without_a_new_sample(db):
    now = datetime.now(UTC)
    n = b.node("gpu-a", interval_s=30)
    first, second = b.device(n, 0), b.device(n, 1)
    b.latest(first, 90, 600, ts=now)
    b.latest(second, 90, 600, ts=now)
    xid(first, 79, now - timedelta(minutes=1))
    reader = broadcast.FleetReader()
    _, frame = reader.tick(now)  # what each tick reads
    assert frame.cards["unhealthy"] == 1
    from dashboard.readings import fleet_overview

    assert fleet_overview(now)["cards"]["unhealthy"] == 1, "as the page counts them"
    _, again = reader.tick(now)
    assert not fleetstate.changed(again, frame).any() and again.unhealthy == frame.unhealthy, "nothing new"

    xid(second, 94, now)  # a contained ECC error: critical, and no new sample with it
    _, later = reader.tick(now)
    assert list(np.flatnonzero(fleetstate.changed(later, again))) == [1], "its state bits changed"
    assert later.cards["unhealthy"] == 2 and set(later.unhealthy) == {0, 1}

    healed = now + DeviceEvent.UNHEALTHY_FOR + timedelta(seconds=1)  # both events a day old: healthy again
    _, frame = reader.tick(healed)
    assert frame.cards["unhealthy"] == 0 and frame.unhealthy == {}


def test_the_fleet_api_gives_each_device_its_unhealthy_event_or_null(client, viewer, api_token, db):
    now = datetime.now(UTC).replace(microsecond=0)
    sick = DeviceInfo("GPU-sick", "gpu-a", 0, "NVIDIA H100 80GB HBM3", "nvml", mem_total_mib=81920)
    noisy = DeviceInfo("GPU-noisy", "gpu-a", 1, "NVIDIA H100 80GB HBM3", "nvml", mem_total_mib=81920)
    healed = DeviceInfo("GPU-healed", "gpu-a", 2, "NVIDIA H100 80GB HBM3", "nvml", mem_total_mib=81920)
    rows = [(d.uuid, now, 90.0, 40.0, 650.5, 1234.5, 2048, 81920, 71.0, 1980, 55.0) for d in (sick, noisy, healed)]
    # As the agent stores what the NVML source reported (collector.agent.sources.nvml._xid_events).
    events = [(sick.uuid, now - timedelta(minutes=10), "xid", 79, "XID 79", 79 in CRITICAL_XIDS),
              (sick.uuid, now - timedelta(minutes=3), "xid", 64, "XID 64", 64 in CRITICAL_XIDS),
              (noisy.uuid, now - timedelta(minutes=3), "xid", 13, "XID 13", 13 in CRITICAL_XIDS),
              (healed.uuid, now - timedelta(days=2), "xid", 79, "XID 79", 79 in CRITICAL_XIDS)]
    with connection.cursor() as cur:
        cur.execute("SELECT 1")  # BEGIN now, so the writer's transaction nests as a savepoint
    Writer(connection.connection).write(Batch([sick, noisy, healed], rows, interval_s=1.0, events=events))
    assert Device.objects.count() == 3

    response = client.get("/api/fleet", headers={"Authorization": f"Bearer {api_token(viewer)}"})

    assert response.status_code == 200
    [node] = response.json()["nodes"]
    shown = {d["uuid"]: d["unhealthy"] for d in node["devices"]}
    expected_ts = (now - timedelta(minutes=3)).isoformat().replace("+00:00", "Z")
    assert shown == {"GPU-sick": {"kind": "xid", "detail": "XID 64", "ts": expected_ts},  # the newest critical one
                     "GPU-noisy": None, "GPU-healed": None}

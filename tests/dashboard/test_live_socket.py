"""The live socket: only logged-in viewers, only topics they may follow; events reach it; telemetry is broadcast."""

import asyncio
import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from channels.testing import WebsocketCommunicator

from dashboard import broadcast, fleetstate
from dashboard.consumers import LiveConsumer, allowed_topics, required_role
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, user_in_role
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.waiting import wait_for

UTC = timezone.utc


def communicator(user, topics):
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live?topics={topics}")
    comm.scope["user"] = user
    return comm


def test_every_topic_family_needs_a_role_and_unknown_ones_are_refused(viewer, outsider):
    assert required_role("job.12") == "viewer" and required_role("node.3") == "viewer" and required_role("alerts") == "viewer"
    assert required_role("secrets") is None and required_role("job.abc") is None
    assert allowed_topics(viewer, ["fleet", "job.1", "admin", "node.x"]) == (["fleet", "job.1"], ["admin", "node.x"])
    assert allowed_topics(outsider, ["fleet"]) == ([], ["fleet"])


def test_a_viewer_gets_the_events_of_its_topics_and_is_told_what_was_refused(transactional_db, viewer):
    from yardstick.live import send_now

    async def scenario():
        comm = communicator(viewer, "job.7%2Cjobs,bogus")  # commas as a browser's encodeURIComponent sends them
        connected, _ = await comm.connect()
        assert connected
        first = await comm.receive_json_from(timeout=5)
        assert first["kind"] == "subscribed"
        assert first["data"] == {"topics": ["job.7", "jobs"], "refused": ["bogus"]}
        await asyncio.get_running_loop().run_in_executor(None, send_now, "job.7", "step", {"step": 3})
        event = await comm.receive_json_from(timeout=5)
        assert event == {"topic": "job.7", "kind": "step", "data": {"step": 3}}
        await comm.disconnect()

    asyncio.run(scenario())


def test_an_outsider_is_closed_with_4403(transactional_db, outsider):
    async def scenario():
        comm = communicator(outsider, "fleet")
        connected, code = await comm.connect()
        assert not connected and code == 4403
        # The browser's side of the close: the consumer ends by itself instead of being cancelled when
        # the loop closes (a channel-layer read cancelled there could hang the test for minutes).
        await comm.disconnect(code)

    asyncio.run(scenario())


def frame_at(reader, now):
    """What the publisher's tick computes at `now`: (layout event or None, decoded whole frame, the Frame)."""
    layout, frame = reader.tick(now)
    head = fleetstate.frame_header(frame, reader.layout, 1)
    return layout, fleetstate.decode(fleetstate.encode(frame, head)), frame


def position(reader, node, index):
    L = reader.layout
    return next(i for i in range(L.size) if L.node_names[L.device_node[i]] == node and L.device_index[i] == index)


def test_a_frame_carries_only_the_devices_that_changed_each_in_a_few_bytes(db):
    now = datetime.now(UTC)
    n = b.node("gpu-a")
    d0, d1 = b.device(n, 0), b.device(n, 1)
    b.latest(d0, 50.4, 300.5, ts=now - timedelta(seconds=1))
    b.latest(d1, 10, 100, ts=now - timedelta(minutes=15))
    reader = broadcast.FleetReader()
    layout, (kind, header, devices), first = frame_at(reader, now)
    assert layout is not None and kind == "S"
    p0, p1 = position(reader, "gpu-a", 0), position(reader, "gpu-a", 1)
    # util a whole percent, state bits, power whole watts (half to even), age in hundredths of a second
    assert devices[p0] == (50, fleetstate.BUSY, 300, 100)
    assert devices[p1][1] == fleetstate.STALE and devices[p1][3] == fleetstate.AGE_MAX
    assert header["old_ages"] == {str(p1): 900.0}, "an age past a short is named in seconds"
    assert header["cards"]["power_kw"] == 0.3005, "only fresh devices count toward fleet power"
    reader.last = first
    b.latest(d0, 70, 350, ts=now)
    _, frame = reader.tick(now)
    mask = fleetstate.changed(frame, first)
    kind, header, devices = fleetstate.decode(fleetstate.encode(frame, {"seq": 2}, mask))
    assert kind == "D" and list(devices) == [p0] and devices[p0][:3] == (70, fleetstate.BUSY, 350)
    _, again = reader.tick(now)
    assert not fleetstate.changed(again, frame).any(), "nothing new: nothing carried"


def test_every_device_costs_a_frame_six_bytes_and_a_bit(db):
    layout = fleetstate.layout_of([(1 + i // 8, f"n{i // 8:05d}", {}, 1.0, 1 + i, i % 8, "H100", "nvml", False, False)
                                   for i in range(10_000)])
    now_us = fleetstate.epoch_us(datetime.now(UTC))
    values = fleetstate.values_of(layout, [(1 + i, now_us - 300_000, i % 100, 300.0 + i % 400, 0) for i in range(10_000)])
    frame = fleetstate.compute(layout, values, now_us)
    every = fleetstate.encode(frame, {"seq": 1}, mask=np.ones(10_000, dtype=bool))
    assert len(every) <= 10_000 * 6 + 10_000 // 8 + 400, len(every)
    assert fleetstate.decode(every)[2][9_999] == (99, fleetstate.BUSY, 300 + 9_999 % 400, 30)


def test_the_layout_is_kept_until_what_the_page_lays_out_changes(db, django_assert_num_queries):
    from collector.models import Device, Node

    n = b.node("gpu-a")
    first = b.device(n, 0)
    kept = fleetstate.read_layout()
    with django_assert_num_queries(1):  # the generation's one row, no read of the fleet
        assert fleetstate.read_layout() is kept
    Device.objects.filter(pk=first.pk).update(mem_total_mib=1)  # not laid out: still kept
    assert fleetstate.read_layout() is kept

    b.device(n, 1)
    grown = fleetstate.read_layout()
    assert grown.size == 2 and grown is not kept
    Node.objects.filter(pk=n.pk).update(labels={"pool": "a"})
    assert fleetstate.read_layout().node_labels == [{"pool": "a"}]
    Device.objects.filter(pk=first.pk).update(model="NVIDIA B200")
    assert fleetstate.read_layout().models == ["NVIDIA B200", "NVIDIA H100 80GB HBM3"]
    Device.objects.filter(pk=first.pk).delete()
    assert fleetstate.read_layout().size == 1


def test_a_layout_change_not_yet_committed_is_not_kept_as_the_new_generation(transactional_db):
    from django.db import connections

    n = b.node("gpu-a")
    b.device(n, 0)
    before = fleetstate.read_layout()
    other = connections.create_connection("default")  # an agent registering a device, in its own transaction
    try:
        other.set_autocommit(False)
        with other.cursor() as cur:
            cur.execute("INSERT INTO collector_device (uuid, node_id, index, model, source, simulated, "
                        "power_estimated, first_seen, registered_at) "
                        "VALUES ('GPU-new', %s, 1, 'H100', 'nvml', false, false, now(), now())", [n.pk])
        assert fleetstate.read_layout() is before, "the uncommitted device is neither seen nor its generation"
        other.commit()
    finally:
        other.close()
    after = fleetstate.read_layout()
    assert after.size == 2 and [after.label(i) for i in range(2)] == ["GPU 0", "GPU 1"]


def test_the_frame_carries_the_cards_and_changes_when_a_device_goes_stale_without_a_new_row(db):
    from decimal import Decimal

    from dashboard.readings import fleet_overview

    now = datetime.now(UTC)
    b.prices(per_hour="2.00", per_kwh="0.10", pue="1.5")
    busy_node, quick_node = b.node("gpu-a", interval_s=30), b.node("gpu-b", interval_s=1)
    busy = b.device(busy_node, 0)
    b.device(busy_node, 1)  # never reported: stale
    idle = b.device(quick_node, 0)
    b.latest(busy, 90, 600, ts=now)
    b.latest(idle, 5, 100, ts=now)
    reader = broadcast.FleetReader()
    _, (_, header, _), first = frame_at(reader, now)
    # 2 fresh devices x $2/h + 0.7 kW x $0.10/kWh x PUE 1.5 = $4.105 → $4.11, as the page's card says.
    cards = header["cards"]
    assert (cards["busy"], cards["idle"], cards["stale"], cards["devices"], cards["burn_usd_per_h"]) == (1, 1, 1, 3, "4.11")
    page = fleet_overview(now)["cards"]
    assert (page["busy"], page["idle"], page["stale"], page["burn_usd_per_h"]) == (1, 1, 1, Decimal("4.11"))

    later = now + timedelta(seconds=3.5)  # gpu-b's sample is older than 3 of its 1 s intervals
    _, frame = reader.tick(later)
    mask = fleetstate.changed(frame, first)
    kind, header, devices = fleetstate.decode(fleetstate.encode(frame, fleetstate.frame_header(frame, reader.layout, 2), mask))
    assert list(devices) == [position(reader, "gpu-b", 0)], "no new sample, but its state changed"
    assert devices[position(reader, "gpu-b", 0)][1] == fleetstate.STALE
    cards = header["cards"]
    assert (cards["busy"], cards["idle"], cards["stale"], cards["burn_usd_per_h"], cards["power_kw"]) == (1, 0, 2, "2.09", 0.6)


# The fixture rather than the marker: the root conftest empties the telemetry tables after tests that name it.
def test_a_node_subscriber_receives_new_samples_within_a_second(transactional_db, viewer):
    from collector.models import LatestSample

    n = b.node("gpu-a")
    dev = b.device(n, 0)
    b.latest(dev, 50, 300)
    shown = LatestSample.objects.get(device=dev).ts

    async def scenario():
        comm = communicator(viewer, f"node.{n.pk}")
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from(timeout=5))["kind"] == "subscribed"
        loop = asyncio.get_running_loop()
        # The poller's first read sets what the page already shows; the new sample comes after it.
        await loop.run_in_executor(None, lambda: wait_for(lambda: broadcast.broadcaster.seen.get(dev.pk) == shown, 5,
                                                          "the poller's first read"))
        await loop.run_in_executor(None, lambda: b.latest(dev, 99, 400))
        event = await comm.receive_json_from(timeout=3)
        assert event["topic"] == f"node.{n.pk}" and event["data"]["samples"][0]["util_pct"] == 99
        await comm.disconnect()

    asyncio.run(scenario())
    assert not broadcast.broadcaster.subscribers


def test_a_node_socket_is_told_when_the_samples_cannot_be_read_and_when_they_can_again(transactional_db, viewer,
                                                                                        monkeypatch):
    n = b.node("gpu-a")
    b.latest(b.device(n, 0), 50, 300)
    broken = {"on": False}
    real = broadcast.latest_rows

    def latest_rows(**kwargs):
        if broken["on"]:
            raise RuntimeError("connection refused\nmore detail")
        return real(**kwargs)

    monkeypatch.setattr(broadcast, "latest_rows", latest_rows)

    async def reading(comm):
        while True:
            event = await comm.receive_json_from(timeout=10)
            if event["kind"] == "reading":
                return event

    async def scenario():
        comm = communicator(viewer, f"node.{n.pk}")
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from(timeout=5))["kind"] == "subscribed"
        broken["on"] = True
        assert await reading(comm) == {"topic": f"node.{n.pk}", "kind": "reading", "data": {"ok": False}}
        assert broadcast.broadcaster.node_failing == "connection refused"
        broken["on"] = False
        assert await reading(comm) == {"topic": f"node.{n.pk}", "kind": "reading", "data": {"ok": True}}
        assert broadcast.broadcaster.node_failing is None
        await comm.disconnect()

    asyncio.run(scenario())
    assert not broadcast.broadcaster.subscribers



# A real client (Chromium's WebSocket) against Daphne: subscribe, note the group's size in Redis, send `frame`.
SEND_BAD_FRAME = """async ([topic, frame]) => {
    const ws = new WebSocket(location.origin.replace("http", "ws") + "/ws/live?topics=" + topic);
    await new Promise((ok) => { ws.onmessage = (m) => { if (JSON.parse(m.data).kind === "subscribed") ok(); }; });
    const joined = await window.groupSize();
    const closed = new Promise((ok) => { ws.onclose = (e) => ok({code: e.code, reason: e.reason}); });
    ws.send(frame === "binary" ? new Uint8Array([0, 159, 146, 150]) : frame);
    return {joined: joined, ...(await closed)};  // Daphne sends no reason
}"""


@pytest.mark.browser
@pytest.mark.parametrize("frame", ["binary", "not json {", "[" * 100_000])
def test_it_closes_politely_on_a_frame_no_page_sends_and_leaves_its_groups(  # noqa: F811
        live_web, page, django_user_model, frame):
    import redis
    from django.conf import settings

    topic = f"job.{random.randrange(10**9, 10**10)}"  # a group of its own in the suite's shared Redis
    key, members = f"asgi:group:live.{topic}", redis.Redis.from_url(settings.REDIS_URL)
    user_in_role(django_user_model, "wes", "viewer", subprocess=True)
    log_in(page, live_web.url, "wes", "/jobs?live=0")
    page.expose_function("groupSize", lambda: members.zcard(key))

    closed = page.evaluate(SEND_BAD_FRAME, [topic, frame])

    assert closed["joined"] == 1 and closed["code"] == 4400, closed
    wait_for(lambda: members.zcard(key) == 0, 5, "the closed socket to leave its group")
    assert "Traceback" not in live_web.log("daphne").read_text()


def test_a_consumer_that_crashes_leaves_its_groups_and_the_broadcaster(transactional_db, viewer):
    import redis
    from django.conf import settings

    from yardstick.live import send_now

    topic = f"job.{random.randrange(10**9, 10**10)}"
    key, members = f"asgi:group:live.{topic}", redis.Redis.from_url(settings.REDIS_URL)

    async def scenario():
        comm = communicator(viewer, f"fleet,{topic}")
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from(timeout=5))["kind"] == "subscribed"
        assert members.zcard(key) == 1 and broadcast.broadcaster.subscribers
        # An event it cannot write as JSON (bytes travel through the channel layer): the consumer raises.
        await asyncio.get_running_loop().run_in_executor(None, send_now, topic, "step", {"blob": b"\x00"})
        # Fleet frames may come first (this process may have been elected publisher); the crash ends the loop.
        with pytest.raises(TypeError):
            while True:
                await comm.receive_output(timeout=5)

    asyncio.run(scenario())
    assert members.zcard(key) == 0, "its group no longer holds it"
    assert not broadcast.broadcaster.subscribers, "the telemetry poller reads for no one"


@pytest.mark.browser
def test_a_fleet_event_too_big_to_send_closes_the_socket_and_the_page_stops_saying_live(  # noqa: F811
        transactional_db, tmp_path, page, django_user_model):
    from tests.dashboard.live_stack import LiveStack

    # Daphne holds the relay's sends to its message limit: one of 2 kB, and the layout of 400 devices (several
    # kB) stand in for a fleet past the limit `up` sets.
    stack = LiveStack(tmp_path, worker=False, daphne_args=["--websocket-max-message-size", "2048"]).start()
    try:
        n = b.node("gpu-a")
        for i in range(400):
            b.latest(b.device(n, i), 10, 100)
        user_in_role(django_user_model, "vera", "viewer", subprocess=True)
        log_in(page, stack.url, "vera", "/")
        # Not "live" while nothing more can arrive: the server closed the socket, the page reconnects.
        page.wait_for_function("document.getElementById('live-state').dataset.state === 'reconnecting'",
                               timeout=15000)
        log = stack.log("daphne").read_text()
        assert "dropping a live subscriber" in log and "Traceback" not in log
    finally:
        stack.stop()

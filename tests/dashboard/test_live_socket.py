"""The live socket: only logged-in viewers, only topics they may follow; events reach it; telemetry is broadcast."""

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from channels.testing import WebsocketCommunicator

from dashboard import broadcast
from dashboard.consumers import LiveConsumer, allowed_topics, required_role
from tests.dashboard import builders as b

UTC = timezone.utc


def communicator(user, topics):
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live?topics={topics}")
    comm.scope["user"] = user
    return comm


def test_every_topic_family_needs_a_role_and_unknown_ones_are_refused(viewer, outsider):
    assert required_role("job.12") == "viewer" and required_role("node.3") == "viewer"
    assert required_role("secrets") is None and required_role("job.abc") is None
    assert allowed_topics(viewer, ["fleet", "job.1", "admin", "node.x"]) == (["fleet", "job.1"], ["admin", "node.x"])
    assert allowed_topics(outsider, ["fleet"]) == ([], ["fleet"])


@pytest.mark.django_db(transaction=True)
def test_a_viewer_gets_the_events_of_its_topics_and_is_told_what_was_refused(viewer):
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


@pytest.mark.django_db(transaction=True)
def test_an_outsider_is_closed_with_4403(outsider):
    async def scenario():
        comm = communicator(outsider, "fleet")
        connected, code = await comm.connect()
        assert not connected and code == 4403

    asyncio.run(scenario())


def test_the_broadcaster_sends_only_devices_whose_newest_sample_changed(db):
    now = datetime.now(UTC)
    n = b.node("gpu-a")
    d0, d1 = b.device(n, 0), b.device(n, 1)
    b.latest(d0, 50, 300, ts=now - timedelta(seconds=1))
    b.latest(d1, 10, 100, ts=now - timedelta(minutes=5))
    seen = {}
    fleet, nodes = broadcast.events(broadcast.read_latest(), seen, now)
    assert {d["uuid"] for d in fleet["devices"]} == {d0.uuid, d1.uuid}
    assert fleet["power_kw"] == 0.3, "only fresh devices count toward fleet power"
    assert list(nodes) == [n.pk]
    assert broadcast.events(broadcast.read_latest(), seen, now) == (None, {}), "nothing new: nothing sent"
    b.latest(d0, 70, 350, ts=now)
    fleet, nodes = broadcast.events(broadcast.read_latest(), seen, now)
    assert [d["uuid"] for d in fleet["devices"]] == [d0.uuid] and fleet["devices"][0]["util_pct"] == 70


@pytest.mark.django_db(transaction=True)
def test_a_node_subscriber_receives_new_samples_within_a_second(viewer):
    n = b.node("gpu-a")
    dev = b.device(n, 0)
    b.latest(dev, 50, 300)

    async def scenario():
        comm = communicator(viewer, f"node.{n.pk}")
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from(timeout=5))["kind"] == "subscribed"
        await asyncio.sleep(0.8)  # the poller's first read sets what the page already shows
        await asyncio.get_running_loop().run_in_executor(None, lambda: b.latest(dev, 99, 400))
        event = await comm.receive_json_from(timeout=3)
        assert event["topic"] == f"node.{n.pk}" and event["data"]["samples"][0]["util_pct"] == 99
        await comm.disconnect()

    asyncio.run(scenario())
    assert not broadcast.broadcaster.subscribers

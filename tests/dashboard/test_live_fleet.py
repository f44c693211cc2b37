"""The live fleet: one publisher for the control plane, elected in Redis; every web process relays its frames.

Each Broadcaster here stands for one web process (the suite's real Redis between them, the consumers real
LiveConsumers on WebsocketCommunicators): a new fleet socket gets the layout and a whole frame, then only
what changed; of two processes with viewers only one reads and publishes, and when its viewers go the
other takes over and its viewers never miss a change.
"""

import asyncio
import json
from datetime import UTC, datetime

import pytest
from channels.testing import WebsocketCommunicator

from dashboard import broadcast, consumers, fleetstate
from tests.dashboard import builders as b
from tests.dashboard.live_stack import fresh_fleet_keys  # noqa: F401 - fixture
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(user, query=""):
    comm = WebsocketCommunicator(consumers.LiveConsumer.as_asgi(), "/ws/live?topics=fleet" + query)
    comm.scope["user"] = user
    return comm


async def next_fleet(comm, timeout=10):
    """The next fleet message: ("layout"|"reading", data) for a text event, (kind, header, devices) for a frame."""
    while True:
        out = await comm.receive_output(timeout=timeout)
        if out.get("bytes") is not None:
            return fleetstate.decode(out["bytes"])
        event = json.loads(out["text"])
        if event["topic"] == "fleet":
            return event["kind"], event["data"]


async def frame_where(comm, check, timeout=10):
    """Frames until one whose devices pass `check` (layouts and empty deltas pass by)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        got = await next_fleet(comm, timeout=end - loop.time())
        if got[0] in ("S", "D") and check(got[2]):
            return got
    raise AssertionError("no such frame")


def test_a_fleet_socket_gets_the_layout_a_whole_frame_then_only_what_changed(viewer, fresh_fleet_keys, monkeypatch):
    n = b.node("gpu-a", interval_s=30)
    d0, d1 = b.device(n, 0), b.device(n, 1)
    b.latest(d0, 40, 300)
    b.latest(d1, 60, 310)

    async def scenario():
        comm = communicator(viewer)
        assert (await comm.connect())[0]
        assert json.loads((await comm.receive_output(timeout=5))["text"])["kind"] == "subscribed"
        kind, layout = await next_fleet(comm)
        assert kind == "layout" and layout["nodes"][0][0] == "gpu-a" and layout["index"] == [0, 1]
        kind, header, devices = await next_fleet(comm)
        assert kind == "S" and sorted(devices) == [0, 1] and devices[1][0] == 60
        assert header["cards"]["busy"] == 2
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: b.latest(d1, 5, 90))
        kind, header, devices = await frame_where(comm, lambda d: 1 in d)
        assert kind == "D" and list(devices) == [1] and devices[1][:3] == (5, fleetstate.IDLE, 90)
        assert (header["cards"]["busy"], header["cards"]["idle"]) == (1, 1)
        await comm.disconnect()

    asyncio.run(scenario())
    assert not broadcast.broadcaster.fleet, "gone from the relay"
    wait_for(lambda: fresh_fleet_keys.get(broadcast.PUBLISHER_KEY) is None, 5, "the publisher to let go of its lock")


def test_a_socket_whose_page_has_the_layout_gets_the_whole_frame_alone(viewer, fresh_fleet_keys):
    n = b.node("gpu-a", interval_s=30)
    b.latest(b.device(n, 0), 40, 300)
    layout = fleetstate.read_layout()
    version = layout.version
    assert broadcast.layout_version(fleetstate.layout_event(layout)) == version
    assert broadcast.layout_version('{"topic":"fleet","kind":"reading","data":{"ok":true}}') is None

    async def welcome(query):
        """The kinds of the first fleet messages, up to the whole frame (the layout comes before it)."""
        comm = communicator(viewer, query)
        assert (await comm.connect())[0]
        assert json.loads((await comm.receive_output(timeout=5))["text"])["kind"] == "subscribed"
        kinds = [(await next_fleet(comm))[0]]
        if kinds[0] == "layout":
            kinds.append((await next_fleet(comm))[0])
        await comm.disconnect()
        return kinds

    async def scenario():
        assert await welcome("") == ["layout", "S"]  # now a layout and a whole frame wait in Redis
        assert await welcome(f"&layout={version}") == ["S"]
        # Another layout, or none that could be one: the welcome sends the fleet's.
        assert await welcome("&layout=0ff") == ["layout", "S"]
        assert await welcome("&layout=../x") == ["layout", "S"]

    asyncio.run(scenario())


def test_of_two_web_processes_one_publishes_and_the_other_takes_over_when_it_goes(viewer, fresh_fleet_keys,
                                                                                  monkeypatch):
    n = b.node("gpu-a", interval_s=30)
    dev = b.device(n, 0)
    b.latest(dev, 40, 300)
    first, second = broadcast.Broadcaster(), broadcast.Broadcaster()

    async def scenario():
        loop = asyncio.get_running_loop()
        comms = []
        for process in (first, second):
            monkeypatch.setattr(consumers, "broadcaster", process)  # the socket opens in this "process"
            comm = communicator(viewer)
            assert (await comm.connect())[0]
            comms.append(comm)
        for comm in comms:
            await frame_where(comm, lambda d: 0 in d)
        await asyncio.sleep(2)  # a few ticks: one reads and publishes, the other only relays
        assert (first.published > 0) != (second.published > 0), (first.published, second.published)
        publisher, relay = (first, second) if first.published else (second, first)
        own, other = (comms[0], comms[1]) if publisher is first else (comms[1], comms[0])
        await loop.run_in_executor(None, lambda: b.latest(dev, 77, 500))
        for comm in comms:
            _, _, devices = await frame_where(comm, lambda d: d.get(0, (0,))[0] == 77)
        relayed_before = relay.published
        await own.disconnect()  # the publisher's last viewer goes: it lets go, the other takes the lock
        await loop.run_in_executor(None, lambda: wait_for(lambda: relay.published > relayed_before, 10,
                                                          "the other process to publish"))
        await loop.run_in_executor(None, lambda: b.latest(dev, 12, 200))
        _, _, devices = await frame_where(other, lambda d: d.get(0, (0,))[0] == 12)
        assert devices[0][1] & 3 == fleetstate.BUSY
        await other.disconnect()

    asyncio.run(scenario())


def test_the_publisher_reads_the_fleet_as_soon_as_an_agent_commits_samples(viewer, fresh_fleet_keys, pg_dsn,
                                                                          monkeypatch):
    """The agents' writes NOTIFY; the publisher LISTENs and reads at once, not at its next quiet poll."""
    import psycopg

    from collector.agent.batch import Batch, DeviceInfo
    from collector.agent.writer import Writer

    monkeypatch.setattr(broadcast, "QUIET_POLL_S", 60.0)  # without the NOTIFY, the next read is a minute away
    gpu = DeviceInfo("GPU-L0", "gpu-l", 0, "NVIDIA H100 80GB HBM3", "nvml", mem_total_mib=81920)

    def write(util_pct):
        row = (gpu.uuid, datetime.now(UTC), util_pct, 10.0, 300.0, 1000.0, 1024, 81920, 60.0, 1980, 40.0)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the agent's own connection: it commits
            Writer(conn).write(Batch([gpu], [row], interval_s=1.0))

    write(40.0)

    async def scenario():
        loop = asyncio.get_running_loop()
        comm = communicator(viewer)
        assert (await comm.connect())[0]
        await frame_where(comm, lambda d: d.get(0, (0,))[0] == 40)
        await asyncio.sleep(1.5)  # listening by now; the reads its first NOTIFY asked for are done
        await loop.run_in_executor(None, write, 77.0)
        started = loop.time()
        await frame_where(comm, lambda d: d.get(0, (0,))[0] == 77, timeout=10)
        assert loop.time() - started < 5
        await comm.disconnect()

    asyncio.run(scenario())


def test_while_the_database_cannot_be_read_the_fleet_sockets_are_told_and_then_told_again(
        viewer, fresh_fleet_keys, monkeypatch):
    b.latest(b.device(b.node("gpu-a"), 0), 40, 300)
    broken = {"on": False}
    real = fleetstate.read_values

    def read_values(layout):
        if broken["on"]:
            raise RuntimeError("connection refused\nmore detail")
        return real(layout)

    monkeypatch.setattr(fleetstate, "read_values", read_values)

    async def scenario():
        comm = communicator(viewer)
        assert (await comm.connect())[0]
        await frame_where(comm, lambda d: True)
        broken["on"] = True
        while (got := await next_fleet(comm)) != ("reading", {"ok": False}):
            pass
        broken["on"] = False
        while (got := await next_fleet(comm)) != ("reading", {"ok": True}):
            pass
        assert got == ("reading", {"ok": True})
        await comm.disconnect()

    asyncio.run(scenario())


def test_the_page_renders_the_frame_the_sockets_get(viewer_client):
    import base64

    now = datetime.now(UTC)
    n = b.node("gpu-a", interval_s=30)
    b.latest(b.device(n, 0), 33.5, 250.5, ts=now)
    start = json.loads(viewer_client.get("/").context["fleet_start"])
    kind, header, devices = fleetstate.decode(base64.b64decode(start["frame"]))
    assert start["layout"]["nodes"][0][0] == "gpu-a" and header["layout"] == start["layout"]["version"]
    assert kind == "S" and devices[0][:3] == (34, fleetstate.BUSY, 250), "whole percent and watts, half to even"

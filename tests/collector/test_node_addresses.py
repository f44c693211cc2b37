"""A node's IP addresses: the agent reads its machine's (the host and nvml sources) and stores them on its node, so a
scheduler that names the node by address (Ray names its nodes by IP) finds the agent's node of another name
(launch.remote.tie). A batch without addresses (a sim or dcgm source, an older spool) leaves them as they are."""

import ipaddress

from collector.agent.batch import Batch, DeviceInfo
from collector.agent.runner import Agent
from collector.agent.sources.base import machine_addresses
from collector.agent.sources.host import HostSource
from collector.agent.spool import Spool
from collector.agent.writer import Writer
from collector.models import Node

GPU0 = DeviceInfo("GPU-0", "node-a", 0, "NVIDIA H100 80GB HBM3", "nvml")


def test_the_host_agent_stores_its_machines_addresses_on_its_node(telemetry_dsn, tmp_path):
    agent = Agent(HostSource(node="walker-box"), telemetry_dsn, Spool(tmp_path), interval_s=0.01)

    agent.run(ticks=1)

    stored = Node.objects.get(name="walker-box").addresses
    assert stored == machine_addresses() and stored, "a machine with a network has an address beside loopback"
    for text in stored:
        address = ipaddress.ip_address(text)
        assert not (address.is_loopback or address.is_link_local), text


def test_a_batch_without_addresses_keeps_the_nodes_and_a_batch_with_new_ones_replaces_them(pg_conn):
    Writer(pg_conn).write(Batch([GPU0], [], addresses=["10.0.0.5", "fd00::5"]))
    assert Node.objects.get(name="node-a").addresses == ["10.0.0.5", "fd00::5"]

    Writer(pg_conn).write(Batch([GPU0], []))  # a source that reads no machine's own: nothing said of them
    assert Node.objects.get(name="node-a").addresses == ["10.0.0.5", "fd00::5"]

    Writer(pg_conn).write(Batch([GPU0], [], addresses=["10.0.0.9"]))  # the machine moved
    assert Node.objects.get(name="node-a").addresses == ["10.0.0.9"]


def test_a_spooled_batch_keeps_its_addresses_and_an_older_spools_has_none():
    batch = Batch([GPU0], [], addresses=["10.0.0.5"])
    assert Batch.from_json(batch.to_json()).addresses == ["10.0.0.5"]
    older = batch.to_json()
    del older["addresses"]
    assert Batch.from_json(older).addresses == []

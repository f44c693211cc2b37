"""What every source shares: the error a source that cannot start raises, and this machine's node name."""

import ipaddress
import os
import socket

import psutil

# The health events NVIDIA documents as needing a reset or drain of the GPU (its XID catalogue): the NVML and
# dcgm sources mark these critical.
CRITICAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})


class SourceError(Exception):
    """A source cannot start at all (no NVIDIA driver, an exporter URL missing); the message is for a person."""


NODE_MAX_CHARS = 255  # the width of the node columns


def node_name(environ=None):
    """This machine's node name: YARDSTICK_NODE when set, else the host name.

    The one name telemetry and training stints share (the trainer reads it
    through settings.YARDSTICK_NODE), so a job's stints meet its node's samples.
    Raise ValueError naming the value when it is no usable name.
    """
    value = (environ if environ is not None else os.environ).get("YARDSTICK_NODE", "").strip()
    if not value:
        return socket.gethostname()
    if len(value) > NODE_MAX_CHARS or any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError(
            f"YARDSTICK_NODE must be a name of at most {NODE_MAX_CHARS} printable characters "
            f"without spaces, got {value!r}"
        )
    return value


def machine_addresses():
    """This machine's IP addresses (every interface's IPv4 and IPv6 ones, loopback and link-local left out),
    sorted: what a scheduler may name the node by (Ray names its nodes by IP), so the control plane can tie such a
    node to this agent's (launch.remote.tie). Read once when a source starts. [] when none can be read."""
    found = set()
    try:
        interfaces = psutil.net_if_addrs()
    except OSError:  # no readable interface table (a locked-down container): the node is known by its name only
        return []
    for entries in interfaces.values():
        for entry in entries:
            if entry.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                address = ipaddress.ip_address(entry.address.split("%")[0])  # fe80::1%eth0: the zone is no part of it
            except ValueError:
                continue
            if not (address.is_loopback or address.is_link_local or address.is_unspecified):
                found.add(address.compressed)
    return sorted(found)

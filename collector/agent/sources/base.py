"""What every source shares: the error a source that cannot start raises, and this machine's node name."""

import os
import socket

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

"""Sources: each reads every device of a node once per tick.

Interface (duck-typed, one small module each):

    source.name                 -> "nvml" | "host" | "dcgm" | "sim"
    source.read(ts)             -> [Reading]; a device that fails this tick is
                                   left out (with one log message), the rest go on
    source.close()

Constructors raise SourceError with a message for a person when the source
cannot start at all (no NVIDIA driver, exporter URL missing).
"""

SOURCES = ("nvml", "host", "dcgm", "sim")


class SourceError(Exception):
    pass


def make_source(name, options):
    """Build the source called `name` from the agent's parsed options (a namespace or dict)."""
    opts = options if isinstance(options, dict) else vars(options)
    node = opts.get("node") or node_name()
    if name == "nvml":
        from .nvml import NvmlSource

        return NvmlSource(node=node)
    if name == "host":
        from .host import HostSource

        return HostSource(node=node, cpu_tdp_w=opts.get("cpu_tdp_w"))
    if name == "dcgm":
        from .dcgm import DcgmSource

        if not opts.get("url"):
            raise SourceError("--source dcgm needs --url, the dcgm-exporter endpoint, e.g. http://node:9400/metrics")
        return DcgmSource(url=opts["url"], node=opts.get("node"))
    if name == "sim":
        from .sim import SimSource

        return SimSource(nodes=opts.get("nodes") or 1, gpus=opts.get("gpus") or 8, seed=opts.get("seed") or 0)
    raise SourceError(f"--source must be one of {', '.join(SOURCES)}, got {name!r}")


NODE_MAX_CHARS = 255  # the width of the node columns


def node_name(environ=None):
    """This machine's node name: YARDSTICK_NODE when set, else the host name.

    The one name telemetry and training stints share (the trainer reads it
    through settings.YARDSTICK_NODE), so a job's stints meet its node's samples.
    Raise ValueError naming the value when it is no usable name.
    """
    import os
    import socket

    value = (environ if environ is not None else os.environ).get("YARDSTICK_NODE", "").strip()
    if not value:
        return socket.gethostname()
    if len(value) > NODE_MAX_CHARS or any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError(
            f"YARDSTICK_NODE must be a name of at most {NODE_MAX_CHARS} printable characters "
            f"without spaces, got {value!r}"
        )
    return value

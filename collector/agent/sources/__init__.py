"""Sources: each reads every device of a node once per tick.

Interface (duck-typed, one small module each):

    source.name                 -> "nvml" | "host" | "dcgm" | "sim"
    source.read(ts)             -> [Reading]; a device that fails this tick is
                                   left out (with one log message), the rest go on
    source.close()
    source.addresses            -> [IP address text] of the machine it reads,
                                   where that is this one (nvml, host); a source
                                   without it reports none (dcgm, sim)

Constructors raise SourceError with a message for a person when the source
cannot start at all (no NVIDIA driver, exporter URL missing).
"""

from .base import NODE_MAX_CHARS, SourceError, node_name

__all__ = ["NODE_MAX_CHARS", "SOURCES", "SourceError", "make_source", "node_name"]

SOURCES = ("nvml", "host", "dcgm", "sim")




def make_source(name, options):
    """Build the source called `name` from the agent's parsed options (a namespace or dict)."""
    opts = options if isinstance(options, dict) else vars(options)
    node = opts.get("node") or node_name()
    if name == "nvml":
        from .nvml import NvmlSource  # here: a source's module (and its dependency) loads only when chosen

        return NvmlSource(node=node)
    if name == "host":
        from .host import HostSource  # here: a source's module (and its dependency) loads only when chosen

        return HostSource(node=node, cpu_tdp_w=opts.get("cpu_tdp_w"))
    if name == "dcgm":
        from .dcgm import DcgmSource  # here: a source's module (and its dependency) loads only when chosen

        if not opts.get("url"):
            raise SourceError("--source dcgm needs --url, the dcgm-exporter endpoint, e.g. http://node:9400/metrics")
        return DcgmSource(url=opts["url"], node=opts.get("node"))
    if name == "sim":
        from .sim import SimSource  # here: a source's module (and its dependency) loads only when chosen

        return SimSource(nodes=opts.get("nodes") or 1, gpus=opts.get("gpus") or 8, seed=opts.get("seed") or 0)
    raise SourceError(f"--source must be one of {', '.join(SOURCES)}, got {name!r}")

"""What a source reports and what the writer stores: devices, readings, batches.

A sample row is a tuple `(device_uuid, ts, *values)` with `values` in
`schema.SAMPLE_FIELDS` order (util_pct, mem_util_pct, power_w, energy_j,
mem_used_mib, mem_total_mib, temp_c, sm_clock_mhz, sm_active_pct); `ts` is an
aware UTC datetime; a value the source does not have is None. Rows carry the
UUID, not the database id, so a batch taken while the database is away can be
spooled and written later.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from . import schema

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_FIELDS = len(schema.SAMPLE_FIELDS)


@dataclass(frozen=True)
class DeviceInfo:
    """One device as its node reports it; registered on start and on change."""

    uuid: str
    node: str
    index: int
    model: str
    source: str
    simulated: bool = False
    # True when power (and so energy) is estimated, not measured.
    power_estimated: bool = False
    mem_total_mib: int | None = None
    # NVML's architecture name ("hopper", "blackwell", "rubin", ...); "" where the source does not say.
    arch: str = ""
    # MIG mode on (True) or off (False); None where the device has no MIG or the source does not say.
    mig_mode: bool | None = None
    # The power scopes it measures beside the GPU's own, e.g. "module,memory"; "" for none.
    power_scopes: str = ""


@dataclass(frozen=True)
class Holder:
    """A process (host PID) or pod that holds a device, with the memory it uses,
    and where the process comes from (lineage.py): so a training run can be
    matched to the devices its processes hold."""

    holder: str  # "pid:1234" or "pod:namespace/name"
    pid: int | None = None
    used_mem_mib: int | None = None
    ancestors: tuple = ()  # parent PID, grandparent, ... (lineage.ANCESTOR_DEPTH at most)
    launcher_ids: dict = field(default_factory=dict)  # e.g. {"SLURM_JOB_ID": "4242"}; {} when none or unreadable


@dataclass(frozen=True)
class Served:
    """One serving deployment's page at one scrape (serving.py): per model, what its counters gained since the last
    scrape and its gauges now; or why the page could not be read (`error`)."""

    deployment: str  # its name, as registered
    ts: datetime
    engine: str = ""  # the engine the page was read as; "" where it could not be read
    error: str = ""  # "" where it was read
    models: tuple = ()  # ((model, {field: value or None}), ...): model "" for an engine that names none
    pid: int | None = None  # the process serving the page on this machine, where the agent sees it
    devices: tuple = ()  # the GPUs (uuids) that process, or one it started, held at the last tick


@dataclass
class Reading:
    """One device's values at one tick, as a source returns them."""

    device: DeviceInfo
    values: tuple  # schema.SAMPLE_FIELDS order, None where the source has no value
    holders: tuple = ()  # (Holder, ...)
    events: tuple = ()  # ((kind, code, detail, critical), ...): what the device reported about its health

    def __post_init__(self):
        # A source that reads only the first fields gives a shorter tuple: the rest are None.
        missing = _FIELDS - len(self.values)
        if missing > 0:
            self.values = tuple(self.values) + (None,) * missing


@dataclass
class Batch:
    """Everything one write stores: devices to register, sample rows, holders, health events."""

    devices: list  # [DeviceInfo]
    rows: list  # [(uuid, ts, *values)]
    holders: list = field(default_factory=list)  # [(uuid, ts, Holder)]
    labels: dict = field(default_factory=dict)  # node labels, e.g. {"team": "rl"}
    interval_s: float = 1.0
    events: list = field(default_factory=list)  # [(uuid, ts, kind, code, detail, critical)]
    # The IP addresses of the machine the batch's node is (sources.base.machine_addresses); [] where the source
    # reads another machine or none (dcgm, sim), which leaves a node's stored addresses as they are.
    addresses: list = field(default_factory=list)
    served: list = field(default_factory=list)  # [Served]: the node's serving deployments, read every few ticks

    def __post_init__(self):
        # Rows made with the first fields only (an import, a benchmark): the rest are None.
        if self.rows and any(len(r) < _FIELDS + 2 for r in self.rows):
            self.rows = [(*r, *(None,) * (_FIELDS + 2 - len(r))) for r in self.rows]

    def to_json(self):
        """Return a JSON-ready dict; timestamps become integer microseconds since the epoch."""
        return {
            "devices": [[getattr(d, f) for f in _DEVICE_FIELDS] for d in self.devices],
            "rows": [[r[0], _to_us(r[1]), *r[2:]] for r in self.rows],
            "holders": [[u, _to_us(ts), h.holder, h.pid, h.used_mem_mib, list(h.ancestors), h.launcher_ids]
                        for u, ts, h in self.holders],
            "labels": self.labels,
            "interval_s": self.interval_s,
            "events": [[u, _to_us(ts), *rest] for u, ts, *rest in self.events],
            "addresses": list(self.addresses),
            "served": [[s.deployment, _to_us(s.ts), s.engine, s.error, [[m, f] for m, f in s.models], s.pid,
                        list(s.devices)] for s in self.served],
        }

    @classmethod
    def from_json(cls, data):
        return cls(
            devices=[DeviceInfo(*d) for d in data["devices"]],
            rows=[(r[0], _from_us(r[1]), *r[2:]) for r in data["rows"]],  # a row spooled before fields were added: padded
            holders=[_holder_from_json(h) for h in data["holders"]],
            labels=data.get("labels", {}),
            interval_s=data.get("interval_s", 1.0),
            events=[(e[0], _from_us(e[1]), *e[2:]) for e in data.get("events", [])],  # none in an older spool
            addresses=data.get("addresses", []),  # none in an older spool
            served=[_served_from_json(s) for s in data.get("served", [])],  # none in an older spool
        )


_DEVICE_FIELDS = ("uuid", "node", "index", "model", "source", "simulated", "power_estimated", "mem_total_mib", "arch",
                  "mig_mode", "power_scopes")


def _served_from_json(item):
    name, us, engine, error, models, *held = item
    pid, devices = held if held else (None, ())
    return Served(name, _from_us(us), engine, error, tuple((m, f) for m, f in models), pid, tuple(devices))


def _holder_from_json(item):
    # Spooled by an agent from before lineage was recorded: five fields, no lineage.
    uuid, ts, holder, pid, mem, *lineage = item
    ancestors, launcher_ids = lineage if lineage else ((), {})
    return uuid, _from_us(ts), Holder(holder, pid, mem, tuple(ancestors), dict(launcher_ids))


def _to_us(ts):
    delta = ts - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_us(us):
    return _EPOCH + timedelta(microseconds=us)

"""NVIDIA GPUs through NVML (`nvidia-ml-py`, imported as `pynvml`).

Units as NVML reports them, converted here: power mW -> W, total energy
mJ -> J (kept cumulative, as reported: the counter starts at driver load, so
it drops to a lower value after a reload; the rollup treats a drop as a new
counter, never as negative energy), memory bytes -> MiB.

A field the device does not support (NVMLError_NotSupported) is None from
then on, without asking again every tick. A device that fails outright (GPU
lost, ...) is skipped with one message per failure streak; the others go on.
SM activity, tensor-core activity and SM occupancy come from GPM (Hopper and
later) as NVML_GPM_METRIC_SM_UTIL, ANY_TENSOR_UTIL and SM_OCCUPANCY between two
ticks; None where GPM (or that metric) is unsupported.

Beside the GPU's own power, field values (one nvmlDeviceGetFieldValues call a
tick) give module power and energy (NVML_POWER_SCOPE_MODULE: GPU, CPU and
memory of a superchip) and memory power (scope MEMORY), in mW and mJ, and
NVLink data sent and received (KiB counters, all links; turned into bytes per
second between two ticks). Each field the device answers NOT_SUPPORTED for
is dropped from the call from then on. The clocks event reasons bitmask (why
clocks are held down: power cap, thermal, sync boost, HW slowdown) and the
enforced power limit are read each tick; the architecture, MIG mode and the
power scopes present once, at start.
Holders: NVML's compute processes (host PIDs) with their ancestors and
launcher ids (lineage.py), for matching training runs to their GPUs.
"""

import ctypes
import logging

from ..batch import DeviceInfo, Reading
from ..lineage import Lineages
from .base import CRITICAL_XIDS, SourceError, machine_addresses

log = logging.getLogger("collector.agent")

MIB = 2**20
KIB = 1024

# The field values read each tick: (name, NVML field id constant, scope constant or None). Module and memory
# power are instant readings; the NVLink counters are cumulative KiB.
FIELDS = (
    ("module_power", "NVML_FI_DEV_POWER_INSTANT", "NVML_POWER_SCOPE_MODULE"),
    ("memory_power", "NVML_FI_DEV_POWER_INSTANT", "NVML_POWER_SCOPE_MEMORY"),
    ("module_energy", "NVML_FI_DEV_ENERGY", "NVML_POWER_SCOPE_MODULE"),
    ("nvlink_tx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None),
    ("nvlink_rx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None),
)
# Health: XID errors arrive through an NVML event set (drained each tick); the uncorrected ECC count and the row
# remapper are read every HEALTH_EVERY ticks. XIDs NVIDIA documents as needing a GPU reset or a node drain
# (double-bit ECC, row remap events, NVLink errors, fallen off the bus, contained/uncontained ECC, GSP errors)
# are critical: the device counts as unhealthy (collector.models.DeviceEvent).
HEALTH_EVERY = 10
# GPM metrics read between two ticks, in the order of the request.
GPM_METRICS = ("NVML_GPM_METRIC_SM_UTIL", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "NVML_GPM_METRIC_SM_OCCUPANCY")


class _Device:
    def __init__(self, info, handle):
        self.info = info
        self.handle = handle
        self.unsupported = set()  # names of fields that raised NotSupported
        self.gpm_prev = None  # previous GPM sample, or None before the first tick
        self.gpm_next = None
        self.gpm_spare = None
        self.failing = False
        self.fields = []  # [(name, (field id, scope id))] the device answered at start
        self.ecc = None  # the uncorrected ECC count since driver load, last read
        self.remap = None  # (corrected rows, uncorrected rows, pending, failure), last read
        self.counters = {}  # name -> (value, timestamp in µs) of the last NVLink counter reading


class NvmlSource:
    name = "nvml"

    def __init__(self, node, nvml=None):
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                raise SourceError(
                    "--source nvml needs the nvidia-ml-py package (pip install nvidia-ml-py)"
                ) from None
        self.nv = nv = nvml
        self.node = node
        self.addresses = machine_addresses()  # this machine's: a scheduler may name the node by one
        try:
            nv.nvmlInit()
        except nv.NVMLError_LibraryNotFound:
            raise SourceError(
                "NVML library (libnvidia-ml.so) not found: this machine has no NVIDIA driver. "
                "Install the driver, or run with --source host (CPU) or --source sim."
            ) from None
        except nv.NVMLError as exc:
            raise SourceError(f"NVML failed to start: {exc}") from None
        self.lineages = Lineages()
        self.reads = 0
        self.orphans = []
        try:
            self.event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError:
            self.event_set = None  # no XID events from this driver; the rest of health is still read
        self.devices = []
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                self.devices.append(self._open(index))
            except nv.NVMLError as exc:
                log.error("GPU %d cannot be read (%s); skipping it, the other GPUs go on", index, exc)
        if not self.devices:
            log.warning("NVML found no readable GPU on %s", node)

    def _open(self, index):
        nv = self.nv
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        fields = self._supported_fields(handle)
        info = DeviceInfo(
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            node=self.node,
            index=index,
            model=_text(nv.nvmlDeviceGetName(handle)),
            source="nvml",
            mem_total_mib=nv.nvmlDeviceGetMemoryInfo(handle).total // MIB,
            arch=self._arch(handle),
            mig_mode=self._mig_mode(handle),
            power_scopes=",".join(scope for scope in ("module", "memory")
                                  if any(name == f"{scope}_power" for name, _ in fields)),
        )
        device = _Device(info, handle)
        device.fields = fields
        if self.event_set is not None:
            try:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self.event_set)
            except nv.NVMLError:
                device.unsupported.add("xid")
        try:
            if nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                device.gpm_prev = None
                device.gpm_next = nv.nvmlGpmSampleAlloc()
                device.gpm_spare = nv.nvmlGpmSampleAlloc()
            else:
                device.unsupported.add("gpm")
        except nv.NVMLError:
            device.unsupported.add("gpm")
        return device

    def _arch(self, handle):
        """NVML's architecture name in lower case ("hopper", "rubin"), "" where NVML does not say."""
        nv = self.nv
        names = {getattr(nv, n): n.removeprefix("NVML_DEVICE_ARCH_").lower() for n in dir(nv)
                 if n.startswith("NVML_DEVICE_ARCH_") and n != "NVML_DEVICE_ARCH_UNKNOWN"}
        try:
            return names.get(nv.nvmlDeviceGetArchitecture(handle), "")
        except nv.NVMLError:
            return ""

    def _mig_mode(self, handle):
        """MIG on or off now; None where the device has no MIG."""
        nv = self.nv
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError:
            return None
        return current == nv.NVML_DEVICE_MIG_ENABLE

    def _supported_fields(self, handle):
        """The FIELDS this device answers (asked once, together): [(name, (field id, scope id))]."""
        nv = self.nv
        wanted = [(name, (getattr(nv, fid), getattr(nv, scope) if scope else 0)) for name, fid, scope in FIELDS]
        try:
            answers = nv.nvmlDeviceGetFieldValues(handle, [key for _, key in wanted])
        except nv.NVMLError:
            return []  # a driver without field values: none of them
        return [(name, key) for (name, key), answer in zip(wanted, answers) if answer.nvmlReturn == nv.NVML_SUCCESS]

    def read(self, ts):
        readings = []
        self.reads += 1
        xids = self._xid_events()
        # Health events of devices that could not be read this tick (an XID 79 comes with a GPU that fell off
        # the bus): [(DeviceInfo, events)], for the agent to store without a sample.
        self.orphans = []
        for device in self.devices:
            try:
                reading = self._read(device)
                events = xids.get(device.info.uuid, [])
                if self.reads % HEALTH_EVERY == 1 or HEALTH_EVERY == 1:
                    events += self._health(device)
                reading.events = tuple(events)
                readings.append(reading)
            except self.nv.NVMLError as exc:
                if xids.get(device.info.uuid):
                    self.orphans.append((device.info, tuple(xids[device.info.uuid])))
                if not device.failing:
                    log.error(
                        "GPU %d (%s) failed to read: %s; skipping it until it answers again",
                        device.info.index,
                        device.info.uuid,
                        exc,
                    )
                device.failing = True
                continue
            if device.failing:
                log.info("GPU %d (%s) answers again", device.info.index, device.info.uuid)
                device.failing = False
        self.lineages.forget_others({h.pid for r in readings for h in r.holders})
        return readings

    def _xid_events(self):
        """{uuid: [(kind, code, detail, critical)]} of the XID errors NVML queued since the last tick."""
        nv, out = self.nv, {}
        if self.event_set is None:
            return out
        for _ in range(1000):  # bounded: a storm of XIDs must not stall sampling
            try:
                data = nv.nvmlEventSetWait_v2(self.event_set, 0)
            except nv.NVMLError:  # NVMLError_Timeout: none left
                break
            # By its handle: a GPU that fell off the bus (XID 79) no longer answers nvmlDeviceGetUUID.
            uuid = next((d.info.uuid for d in self.devices if _same_handle(d.handle, data.device)), None)
            if uuid is None:
                try:
                    uuid = _text(nv.nvmlDeviceGetUUID(data.device))
                except nv.NVMLError:
                    log.warning("XID %s from a GPU NVML cannot name; not recorded", data.eventData)
                    continue
            xid = int(data.eventData)
            out.setdefault(uuid, []).append(("xid", xid, f"XID {xid}", xid in CRITICAL_XIDS))
        return out

    def _health(self, device):
        """Events for what changed in the device's uncorrected ECC count and row remapper since the last read
        (at the first read: what is there already)."""
        nv, h, events = self.nv, device.handle, []
        ecc = self._field(device, "ecc", nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                          nv.NVML_VOLATILE_ECC)
        if ecc is not None and ecc > (device.ecc or 0):
            events.append(("ecc_uncorrected", int(ecc), f"{ecc - (device.ecc or 0)} more uncorrected ECC errors "
                                                        f"({ecc} since the driver loaded)", True))
        device.ecc = ecc if ecc is not None else device.ecc
        remap = self._field(device, "remap", nv.nvmlDeviceGetRemappedRows, h)
        if remap is not None:
            _corrected, uncorrected, pending, failure = remap
            before = device.remap or (0, 0, 0, 0)
            if pending and not before[2]:
                events.append(("row_remap_pending", 1, "a row remapping is pending: the GPU needs a reset", True))
            if failure and not before[3]:
                events.append(("row_remap_failure", 1, "a row remapping failed: the GPU needs service", True))
            if uncorrected > before[1]:
                events.append(("rows_remapped", int(uncorrected),
                               f"{uncorrected - before[1]} more rows remapped for uncorrectable errors", False))
            device.remap = remap
        return events

    def _read(self, device):
        nv, h = self.nv, device.handle
        util = self._field(device, "util", nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._field(device, "mem", nv.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._field(device, "power", nv.nvmlDeviceGetPowerUsage, h)
        energy_mj = self._field(device, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, h)
        temp = self._field(device, "temp", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        clock = self._field(device, "clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        procs = self._field(device, "procs", nv.nvmlDeviceGetComputeRunningProcesses, h) or ()
        reasons = self._field(device, "reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, h)
        limit_mw = self._field(device, "limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)
        extra = self._field_values(device)
        sm_active, tensor_active, occupancy = self._gpm(device)
        values = (
            None if util is None else float(util.gpu),
            None if util is None else float(util.memory),
            None if power_mw is None else power_mw / 1000.0,
            None if energy_mj is None else energy_mj / 1000.0,
            None if mem is None else mem.used // MIB,
            None if mem is None else mem.total // MIB,
            None if temp is None else float(temp),
            clock,
            sm_active,
            _scaled(extra.get("module_power"), 1000.0),
            _scaled(extra.get("memory_power"), 1000.0),
            _scaled(extra.get("module_energy"), 1000.0),
            tensor_active,
            occupancy,
            extra.get("nvlink_tx"),
            extra.get("nvlink_rx"),
            None if reasons is None else int(reasons),
            _scaled(limit_mw, 1000.0),
        )
        holders = tuple(
            self.lineages.holder(p.pid, None if p.usedGpuMemory is None else p.usedGpuMemory // MIB)
            for p in procs
        )
        return Reading(device.info, values, holders)

    def _field(self, device, name, fn, *args):
        if name in device.unsupported:
            return None
        try:
            return fn(*args)
        except self.nv.NVMLError_NotSupported:
            device.unsupported.add(name)
            log.info("GPU %d does not support %s; recording it as empty", device.info.index, name)
            return None

    def _field_values(self, device):
        """{name: value} of the device's field values this tick: power in mW and energy in mJ as NVML gives
        them, NVLink as bytes per second since the previous tick (None at the first, or after a counter reset).
        A field answered with an error this tick is left out; one answered NOT_SUPPORTED is not asked again."""
        if not device.fields or "fields" in device.unsupported:
            return {}
        nv = self.nv
        try:
            answers = nv.nvmlDeviceGetFieldValues(device.handle, [key for _, key in device.fields])
        except nv.NVMLError_NotSupported:
            device.unsupported.add("fields")
            return {}
        out, keep = {}, []
        for (name, key), answer in zip(device.fields, answers):
            if answer.nvmlReturn == nv.NVML_ERROR_NOT_SUPPORTED:
                log.info("GPU %d does not support %s; recording it as empty", device.info.index, name)
                continue
            keep.append((name, key))
            if answer.nvmlReturn != nv.NVML_SUCCESS:
                continue
            value = _field_value(nv, answer)
            if name.startswith("nvlink_"):
                value = self._rate(device, name, value, answer.timestamp)
            out[name] = value
        device.fields = keep
        return out

    @staticmethod
    def _rate(device, name, kib, timestamp_us):
        """Bytes per second of a cumulative KiB counter since its previous reading."""
        before = device.counters.get(name)
        device.counters[name] = (kib, timestamp_us)
        if before is None or kib < before[0] or timestamp_us <= before[1]:
            return None
        return (kib - before[0]) * KIB / ((timestamp_us - before[1]) / 1e6)

    def _gpm(self, device):
        """(SM activity, tensor-core activity, SM occupancy) in percent since the previous tick (GPM); each
        None where GPM, or that metric, is unsupported, and all None at the first tick."""
        none = (None, None, None)
        if "gpm" in device.unsupported:
            return none
        nv = self.nv
        try:
            nv.nvmlGpmSampleGet(device.handle, device.gpm_next)
            values = none
            if device.gpm_prev is not None:
                request = nv.c_nvmlGpmMetricsGet_t()
                request.version = nv.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = len(GPM_METRICS)
                request.sample1 = device.gpm_prev
                request.sample2 = device.gpm_next
                for i, metric in enumerate(GPM_METRICS):
                    request.metrics[i].metricId = getattr(nv, metric)
                nv.nvmlGpmMetricsGet(request)
                values = tuple(float(m.value) if m.nvmlReturn == nv.NVML_SUCCESS else None
                               for m in request.metrics[: len(GPM_METRICS)])
            # Reuse the two buffers: the newest becomes the previous.
            device.gpm_prev, device.gpm_next = device.gpm_next, (device.gpm_prev or device.gpm_spare)
            return values
        except nv.NVMLError_NotSupported:
            device.unsupported.add("gpm")
            return none

    def close(self):
        if self.event_set is not None:
            try:
                self.nv.nvmlEventSetFree(self.event_set)
            except self.nv.NVMLError:
                pass
        for device in self.devices:
            buffers = {id(s): s for s in (device.gpm_prev, device.gpm_next, device.gpm_spare) if s is not None}
            for sample in buffers.values():
                try:
                    self.nv.nvmlGpmSampleFree(sample)
                except self.nv.NVMLError:
                    pass
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass


def _same_handle(a, b):
    """Whether two NVML device handles are the same device: the same object, or pointers to the same address."""
    if a is b:
        return True
    try:
        return ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return False


def _scaled(value, divisor):
    return None if value is None else value / divisor


def _field_value(nv, answer):
    """A field value's number, read from the member of its union that its valueType names."""
    member = {nv.NVML_VALUE_TYPE_DOUBLE: "dVal", nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
              nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
              nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", nv.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
              nv.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal"}[answer.valueType]
    return getattr(answer.value, member)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value

"""NVIDIA GPUs through NVML (`nvidia-ml-py`, imported as `pynvml`).

Units as NVML reports them, converted here: power mW -> W, total energy
mJ -> J (kept cumulative, as reported: the counter starts at driver load, so
it drops to a lower value after a reload; the rollup treats a drop as a new
counter, never as negative energy), memory bytes -> MiB.

A field the device does not support (NVMLError_NotSupported) is None from
then on, without asking again every tick. A device that fails outright (GPU
lost, ...) is skipped with one message per failure streak; the others go on.
SM activity comes from GPM (Hopper and later) as NVML_GPM_METRIC_SM_UTIL,
the share of SMs busy between two ticks; None where GPM is unsupported.
Holders: NVML's compute processes (host PIDs) with their ancestors and
launcher ids (lineage.py), for matching training runs to their GPUs.
"""

import logging

from ..batch import DeviceInfo, Reading
from ..lineage import Lineages
from . import SourceError

log = logging.getLogger("collector.agent")

MIB = 2**20


class _Device:
    def __init__(self, info, handle):
        self.info = info
        self.handle = handle
        self.unsupported = set()  # names of fields that raised NotSupported
        self.gpm_prev = None  # previous GPM sample, or None before the first tick
        self.gpm_next = None
        self.gpm_spare = None
        self.failing = False


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
        info = DeviceInfo(
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            node=self.node,
            index=index,
            model=_text(nv.nvmlDeviceGetName(handle)),
            source="nvml",
            mem_total_mib=nv.nvmlDeviceGetMemoryInfo(handle).total // MIB,
        )
        device = _Device(info, handle)
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

    def read(self, ts):
        readings = []
        for device in self.devices:
            try:
                readings.append(self._read(device))
            except self.nv.NVMLError as exc:
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

    def _read(self, device):
        nv, h = self.nv, device.handle
        util = self._field(device, "util", nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._field(device, "mem", nv.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._field(device, "power", nv.nvmlDeviceGetPowerUsage, h)
        energy_mj = self._field(device, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, h)
        temp = self._field(device, "temp", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        clock = self._field(device, "clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        procs = self._field(device, "procs", nv.nvmlDeviceGetComputeRunningProcesses, h) or ()
        values = (
            None if util is None else float(util.gpu),
            None if util is None else float(util.memory),
            None if power_mw is None else power_mw / 1000.0,
            None if energy_mj is None else energy_mj / 1000.0,
            None if mem is None else mem.used // MIB,
            None if mem is None else mem.total // MIB,
            None if temp is None else float(temp),
            clock,
            self._sm_active(device),
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

    def _sm_active(self, device):
        """Share of SMs busy since the previous tick (GPM), or None."""
        if "gpm" in device.unsupported:
            return None
        nv = self.nv
        try:
            nv.nvmlGpmSampleGet(device.handle, device.gpm_next)
            value = None
            if device.gpm_prev is not None:
                request = nv.c_nvmlGpmMetricsGet_t()
                request.version = nv.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = 1
                request.sample1 = device.gpm_prev
                request.sample2 = device.gpm_next
                request.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
                nv.nvmlGpmMetricsGet(request)
                if request.metrics[0].nvmlReturn == nv.NVML_SUCCESS:
                    value = float(request.metrics[0].value)
            # Reuse the two buffers: the newest becomes the previous.
            device.gpm_prev, device.gpm_next = device.gpm_next, (device.gpm_prev or device.gpm_spare)
            return value
        except nv.NVMLError_NotSupported:
            device.unsupported.add("gpm")
            return None

    def close(self):
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


def _text(value):
    return value.decode() if isinstance(value, bytes) else value

"""A FAKE `pynvml` module for tests: no GPU exists on the machines that run them.

It copies the real nvidia-ml-py (13.x) API the nvml source uses: the function
names, argument order, return shapes, units (power in mW, energy in mJ,
memory in bytes) and the exception classes (NVMLError and its generated
subclasses NVMLError_LibraryNotFound, NVMLError_NotSupported, ...), with the
real error codes. Tests build a fleet with `FakeNvml(gpus=[FakeGpu(...), ...])`
and change a GPU's fields between ticks.
"""

from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRICS_GET_VERSION = 1

NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_HOPPER = 9
NVML_DEVICE_ARCH_BLACKWELL = 10
NVML_DEVICE_ARCH_RUBIN = 13
NVML_DEVICE_ARCH_UNKNOWN = 0xFFFFFFFF
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1

# Field values: ids, the power scopes, and the value types of the union they come in.
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB since driver load, all links
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_POWER_INSTANT = 186  # mW
NVML_FI_DEV_ENERGY = 191  # mJ since driver load
NVML_POWER_SCOPE_GPU = 0
NVML_POWER_SCOPE_MODULE = 1
NVML_POWER_SCOPE_MEMORY = 2
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

# Health: ECC counters and the XID event type.
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
nvmlEventTypeXidCriticalError = 0x0000000000000008

# Clocks event reasons (a bitmask), as the real module names them.
nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonNone = 0x0000000000000000


class NVMLError(Exception):
    """Like the real one: NVMLError(code) becomes the subclass for that code."""

    _valClassMapping = {}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self):
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


def _subclass(name, code):
    def new(cls, *args):
        return NVMLError.__new__(cls, code)

    cls = type(name, (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = cls
    return cls


NVMLError_Uninitialized = _subclass("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_DriverNotLoaded = _subclass("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _subclass("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_GpuIsLost = _subclass("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Timeout = _subclass("NVMLError_Timeout", NVML_ERROR_TIMEOUT)
NVMLError_Unknown = _subclass("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


NOT_SUPPORTED = object()


class FakeGpu:
    """One fake GPU; set a field to NOT_SUPPORTED, or `lost = True`, to make NVML raise. A field value left None
    (module power, NVLink, ...) is answered NOT_SUPPORTED in its own nvmlReturn, as a device without it does;
    `field_values=False` makes the whole call raise, as a driver without field values does."""

    NOT_SUPPORTED = NOT_SUPPORTED

    def __init__(self, uuid, name="NVIDIA H100 80GB HBM3", power_mw=300_000, energy_mj=5_000_000_000,
                 util_gpu=50, util_memory=20, mem_total=80 * 2**30, mem_used=10 * 2**30, temp_c=60,
                 sm_clock_mhz=1980, processes=(), gpm_sm_util=None, arch=NVML_DEVICE_ARCH_HOPPER,
                 mig_mode=NOT_SUPPORTED, gpm_tensor_util=None, gpm_sm_occupancy=None, module_power_mw=None,
                 memory_power_mw=None, module_energy_mj=None, nvlink_tx_kib=None, nvlink_rx_kib=None,
                 clocks_event_reasons=0, power_limit_mw=700_000, field_values=True, ecc_uncorrected=0,
                 remapped_rows=(0, 0, 0, 0), xid_events=True):
        self.uuid = uuid
        self.name = name
        self.power_mw = power_mw
        self.energy_mj = energy_mj
        self.util_gpu = util_gpu
        self.util_memory = util_memory
        self.mem_total = mem_total
        self.mem_used = mem_used
        self.temp_c = temp_c
        self.sm_clock_mhz = sm_clock_mhz
        self.processes = list(processes)  # [(pid, used bytes or None)]
        self.gpm_sm_util = gpm_sm_util  # None: GPM unsupported (pre-Hopper)
        self.gpm_tensor_util = gpm_tensor_util  # None with GPM: that metric unsupported
        self.gpm_sm_occupancy = gpm_sm_occupancy
        self.arch = arch
        self.mig_mode = mig_mode  # NVML_DEVICE_MIG_ENABLE / _DISABLE, or NOT_SUPPORTED
        self.module_power_mw = module_power_mw
        self.memory_power_mw = memory_power_mw
        self.module_energy_mj = module_energy_mj
        self.nvlink_tx_kib = nvlink_tx_kib
        self.nvlink_rx_kib = nvlink_rx_kib
        self.clocks_event_reasons = clocks_event_reasons
        self.power_limit_mw = power_limit_mw
        self.field_values = field_values
        self.ecc_uncorrected = ecc_uncorrected  # since driver load (volatile)
        self.remapped_rows = remapped_rows  # (corrected rows, uncorrected rows, pending, failure)
        self.xid_events = xid_events  # False: registering for XID events answers NOT_SUPPORTED
        self.clock_us = 1_700_000_000_000_000  # the field values' timestamps, µs; advance it between ticks
        self.lost = False
        self.fail_on_open = False

    # -- profiles: what NVML 13 reports on each kind of machine ------------------------------------------

    @classmethod
    def ampere(cls, uuid, **kw):
        """An A100: no GPM, no module or memory power scope, NVLink counters."""
        defaults = dict(name="NVIDIA A100-SXM4-80GB", arch=NVML_DEVICE_ARCH_AMPERE, power_limit_mw=400_000,
                        mig_mode=NVML_DEVICE_MIG_DISABLE, nvlink_tx_kib=1_000, nvlink_rx_kib=2_000)
        return cls(uuid, **{**defaults, **kw})

    @classmethod
    def hopper(cls, uuid, **kw):
        """An H100 SXM: GPM with tensor activity and occupancy, NVLink, no module or memory scope."""
        defaults = dict(name="NVIDIA H100 80GB HBM3", arch=NVML_DEVICE_ARCH_HOPPER, gpm_sm_util=60.0,
                        gpm_tensor_util=35.0, gpm_sm_occupancy=40.0, mig_mode=NVML_DEVICE_MIG_DISABLE,
                        nvlink_tx_kib=10_000, nvlink_rx_kib=20_000)
        return cls(uuid, **{**defaults, **kw})

    @classmethod
    def blackwell_superchip(cls, uuid, **kw):
        """A GB200's GPU: module power and energy (the Grace CPU and memory with it) and memory power."""
        defaults = dict(name="NVIDIA GB200", arch=NVML_DEVICE_ARCH_BLACKWELL, gpm_sm_util=70.0,
                        gpm_tensor_util=50.0, gpm_sm_occupancy=45.0, mig_mode=NVML_DEVICE_MIG_DISABLE,
                        power_mw=900_000, power_limit_mw=1_200_000, module_power_mw=1_150_000,
                        memory_power_mw=90_000, module_energy_mj=9_000_000_000, nvlink_tx_kib=10_000,
                        nvlink_rx_kib=20_000, mem_total=186 * 2**30)
        return cls(uuid, **{**defaults, **kw})

    @classmethod
    def rubin_superchip(cls, uuid, **kw):
        """A Vera Rubin GPU: the module scope present (GPU, Vera CPU, memory), NVLink 6, MIG capable."""
        defaults = dict(name="NVIDIA Rubin", arch=NVML_DEVICE_ARCH_RUBIN, gpm_sm_util=75.0, gpm_tensor_util=62.0,
                        gpm_sm_occupancy=50.0, mig_mode=NVML_DEVICE_MIG_DISABLE, power_mw=1_500_000,
                        power_limit_mw=1_800_000, module_power_mw=1_900_000, memory_power_mw=160_000,
                        module_energy_mj=20_000_000_000, nvlink_tx_kib=40_000, nvlink_rx_kib=80_000,
                        mem_total=288 * 2**30)
        return cls(uuid, **{**defaults, **kw})


class _GpmSample:
    def __init__(self):
        self.value = None


class _Metric:
    def __init__(self):
        self.metricId = 0
        self.nvmlReturn = NVML_SUCCESS
        self.value = 0.0


class _EventSet:
    def __init__(self):
        self.registered = {}  # id(gpu) -> event types
        self.freed = False


class _Value:
    """The union of a field value: every member present, as ctypes reads them (the unused ones 0)."""

    def __init__(self, **members):
        for name in ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal"):
            setattr(self, name, members.get(name, 0))


class _FieldValue:
    """c_nvmlFieldValue_t: fieldId, scopeId, timestamp (µs), latencyUsec, valueType, nvmlReturn, value."""

    def __init__(self, field_id, scope_id, timestamp, value_type, ret, value):
        self.fieldId, self.scopeId, self.timestamp, self.latencyUsec = field_id, scope_id, timestamp, 0
        self.valueType, self.nvmlReturn, self.value = value_type, ret, value


class c_nvmlGpmMetricsGet_t:
    def __init__(self):
        self.version = 0
        self.numMetrics = 0
        self.sample1 = None
        self.sample2 = None
        self.metrics = [_Metric() for _ in range(8)]


class FakeNvml:
    """Install as the `nvml` argument of NvmlSource, or as sys.modules["pynvml"]."""

    def __init__(self, gpus=(), library_missing=False):
        self.gpus = list(gpus)
        self.queued = []  # XID events waiting in event sets: (event set, gpu, xid)
        self.library_missing = library_missing
        self.initialized = False
        self.freed = 0
        # expose the module-level names, as `import pynvml` would
        for name, value in globals().items():
            if name.startswith(("NVML", "c_nvml", "nvmlEventType", "nvmlClocksEventReason")):
                setattr(self, name, value)

    # -- lifecycle --
    def nvmlInit(self):
        if self.library_missing:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized = True

    def nvmlShutdown(self):
        self.initialized = False

    def _gpu(self, handle):
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if handle.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return handle

    def _value(self, handle, attr):
        value = getattr(self._gpu(handle), attr)
        if value is FakeGpu.NOT_SUPPORTED:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return value

    # -- devices --
    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        gpu = self.gpus[index]
        if gpu.fail_on_open:
            raise NVMLError(NVML_ERROR_UNKNOWN)
        return gpu

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle).uuid  # str, as the real @convertStrBytes wrapper returns

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle).name

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._value(handle, "power_mw")  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._value(handle, "energy_mj")  # millijoules since driver load

    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu = self._gpu(handle)
        if gpu.util_gpu is FakeGpu.NOT_SUPPORTED:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)  # percent

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        gpu = self._gpu(handle)
        return SimpleNamespace(total=gpu.mem_total, used=gpu.mem_used, free=gpu.mem_total - gpu.mem_used)  # bytes

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == NVML_TEMPERATURE_GPU
        return self._value(handle, "temp_c")

    def nvmlDeviceGetClockInfo(self, handle, type):
        assert type == NVML_CLOCK_SM
        return self._value(handle, "sm_clock_mhz")

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        gpu = self._gpu(handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for pid, used in gpu.processes]

    def nvmlDeviceGetArchitecture(self, device):
        return self._gpu(device).arch

    def nvmlDeviceGetMigMode(self, device):
        mode = self._value(device, "mig_mode")
        return [mode, mode]  # [current, pending]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._value(handle, "clocks_event_reasons")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._value(handle, "power_limit_mw")  # milliwatts

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        """As the real wrapper: fieldIds are ids or (id, scope id) pairs; one answer each, with its own
        nvmlReturn (NOT_SUPPORTED where the device lacks it)."""
        gpu = self._gpu(handle)
        if not gpu.field_values:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        by_key = {
            (NVML_FI_DEV_POWER_INSTANT, NVML_POWER_SCOPE_GPU): ("power_mw", NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal"),
            (NVML_FI_DEV_POWER_INSTANT, NVML_POWER_SCOPE_MODULE): ("module_power_mw", NVML_VALUE_TYPE_UNSIGNED_INT,
                                                                   "uiVal"),
            (NVML_FI_DEV_POWER_INSTANT, NVML_POWER_SCOPE_MEMORY): ("memory_power_mw", NVML_VALUE_TYPE_UNSIGNED_INT,
                                                                   "uiVal"),
            (NVML_FI_DEV_ENERGY, NVML_POWER_SCOPE_GPU): ("energy_mj", NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal"),
            (NVML_FI_DEV_ENERGY, NVML_POWER_SCOPE_MODULE): ("module_energy_mj", NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                                            "ullVal"),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0): ("nvlink_tx_kib", NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal"),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0): ("nvlink_rx_kib", NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal"),
        }
        out = []
        for field in fieldIds:
            key = tuple(field) if isinstance(field, (tuple, list)) else (field, 0)
            attr, value_type, member = by_key.get(key, (None, NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal"))
            value = getattr(gpu, attr) if attr else None
            if value is None or value is NOT_SUPPORTED:
                out.append(_FieldValue(*key, gpu.clock_us, value_type, NVML_ERROR_NOT_SUPPORTED, _Value()))
            else:
                out.append(_FieldValue(*key, gpu.clock_us, value_type, NVML_SUCCESS, _Value(**{member: value})))
        return out

    # -- health --
    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        assert (errorType, counterType) == (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
        return self._value(handle, "ecc_uncorrected")

    def nvmlDeviceGetRemappedRows(self, device):
        return tuple(self._value(device, "remapped_rows"))

    def nvmlEventSetCreate(self):
        return _EventSet()

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        gpu = self._gpu(handle)
        if not gpu.xid_events:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        eventSet.registered[id(gpu)] = eventTypes

    def nvmlEventSetWait_v2(self, eventSet, timeoutms):
        """The oldest queued event of a GPU registered in the set, or NVMLError_Timeout (timeoutms 0: at once)."""
        for i, (event_set, gpu, xid) in enumerate(self.queued):
            if event_set is eventSet and id(gpu) in eventSet.registered:
                del self.queued[i]
                return SimpleNamespace(device=gpu, eventType=nvmlEventTypeXidCriticalError, eventData=xid,
                                       gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, eventSet):
        eventSet.freed = True

    def xid(self, event_set, gpu, code):
        """Test helper (not NVML): the driver reports XID `code` on `gpu`."""
        self.queued.append((event_set, gpu, code))

    # -- GPM --
    def nvmlGpmQueryDeviceSupport(self, device):
        return SimpleNamespace(version=1, isSupportedDevice=int(self._gpu(device).gpm_sm_util is not None))

    def nvmlGpmSampleAlloc(self):
        return _GpmSample()

    def nvmlGpmSampleFree(self, gpmSample):
        self.freed += 1

    def nvmlGpmSampleGet(self, device, gpmSample):
        gpu = self._gpu(device)
        gpmSample.value = {NVML_GPM_METRIC_SM_UTIL: gpu.gpm_sm_util, NVML_GPM_METRIC_ANY_TENSOR_UTIL: gpu.gpm_tensor_util,
                        NVML_GPM_METRIC_SM_OCCUPANCY: gpu.gpm_sm_occupancy}
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet):
        """Each metric of the second sample; one the device lacks answers NOT_SUPPORTED in its nvmlReturn."""
        request = metricsGet
        assert request.version == NVML_GPM_METRICS_GET_VERSION
        for metric in request.metrics[: request.numMetrics]:
            value = request.sample2.value.get(metric.metricId)
            metric.value = 0.0 if value is None else value
            metric.nvmlReturn = NVML_ERROR_NOT_SUPPORTED if value is None else NVML_SUCCESS
        return request

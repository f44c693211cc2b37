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
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRICS_GET_VERSION = 1


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
NVMLError_Unknown = _subclass("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


class FakeGpu:
    """One fake GPU; set a field to NOT_SUPPORTED, or `lost = True`, to make NVML raise."""

    NOT_SUPPORTED = object()

    def __init__(self, uuid, name="NVIDIA H100 80GB HBM3", power_mw=300_000, energy_mj=5_000_000_000,
                 util_gpu=50, util_memory=20, mem_total=80 * 2**30, mem_used=10 * 2**30, temp_c=60,
                 sm_clock_mhz=1980, processes=(), gpm_sm_util=None):
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
        self.lost = False
        self.fail_on_open = False


class _GpmSample:
    def __init__(self):
        self.value = None


class _Metric:
    def __init__(self):
        self.metricId = 0
        self.nvmlReturn = NVML_SUCCESS
        self.value = 0.0


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
        self.library_missing = library_missing
        self.initialized = False
        self.freed = 0
        # expose the module-level names, as `import pynvml` would
        for name, value in globals().items():
            if name.startswith(("NVML", "c_nvml")):
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

    # -- GPM --
    def nvmlGpmQueryDeviceSupport(self, handle):
        return SimpleNamespace(version=1, isSupportedDevice=int(self._gpu(handle).gpm_sm_util is not None))

    def nvmlGpmSampleAlloc(self):
        return _GpmSample()

    def nvmlGpmSampleFree(self, sample):
        self.freed += 1

    def nvmlGpmSampleGet(self, handle, sample):
        sample.value = self._gpu(handle).gpm_sm_util
        return sample

    def nvmlGpmMetricsGet(self, request):
        assert request.version == NVML_GPM_METRICS_GET_VERSION
        for metric in request.metrics[: request.numMetrics]:
            assert metric.metricId == NVML_GPM_METRIC_SM_UTIL
            metric.value = request.sample2.value
            metric.nvmlReturn = NVML_SUCCESS
        return request

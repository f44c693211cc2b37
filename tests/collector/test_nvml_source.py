"""The nvml source, against a fake pynvml (no GPU on the test machines)."""

import inspect
import logging
import os
import subprocess
import sys
from datetime import datetime, timezone

import fake_pynvml
import pynvml
import pytest
from fake_pynvml import FakeGpu, FakeNvml

from collector.agent import schema
from collector.agent.sources import SourceError
from collector.agent.sources.nvml import NvmlSource

TS = datetime(2025, 1, 1, tzinfo=timezone.utc)


def values(reading):
    return dict(zip(schema.SAMPLE_FIELDS, reading.values))


def test_the_fake_only_uses_names_codes_and_parameters_the_real_pynvml_has():
    for name in dir(FakeNvml):
        if name.startswith("nvml"):
            assert callable(getattr(pynvml, name, None)), name
            fake = list(inspect.signature(getattr(FakeNvml, name)).parameters)[1:]  # without self
            assert fake == list(inspect.signature(getattr(pynvml, name)).parameters), name
    for name, value in vars(fake_pynvml).items():
        if name.startswith(("NVML_", "nvmlClocksEventReason", "nvmlEventType")):
            if name != "NVML_ERROR_UNKNOWN":
                assert getattr(pynvml, name) == value, name
        elif name.startswith("NVMLError_"):
            real = getattr(pynvml, name)
            assert issubclass(real, pynvml.NVMLError)
            assert real(0).value == value(0).value, name
    params = inspect.signature(pynvml.nvmlDeviceGetTemperature).parameters
    assert list(params) == ["handle", "sensor"]


def test_it_converts_milliwatts_millijoules_and_bytes():
    gpu = FakeGpu("GPU-a", power_mw=312_500, energy_mj=7_250_000, mem_used=3 * 2**30, mem_total=80 * 2**30,
                  util_gpu=87, util_memory=31, temp_c=65, sm_clock_mhz=1755)
    source = NvmlSource("node-a", nvml=FakeNvml([gpu]))

    [reading] = source.read(TS)

    assert values(reading) == {
        "util_pct": 87.0, "mem_util_pct": 31.0, "power_w": 312.5, "energy_j": 7250.0,
        "mem_used_mib": 3072, "mem_total_mib": 81920, "temp_c": 65.0, "sm_clock_mhz": 1755,
        "sm_active_pct": None, "module_power_w": None, "memory_power_w": None, "module_energy_j": None,
        "tensor_active_pct": None, "sm_occupancy_pct": None, "nvlink_tx_bytes_s": None, "nvlink_rx_bytes_s": None,
        "clock_event_reasons": 0, "power_limit_w": 700.0,
    }
    assert reading.device.uuid == "GPU-a"
    assert reading.device.model == "NVIDIA H100 80GB HBM3"
    assert reading.device.mem_total_mib == 81920
    assert not reading.device.simulated and not reading.device.power_estimated


def test_it_keeps_the_energy_counter_as_reported_even_when_it_resets():
    gpu = FakeGpu("GPU-a", energy_mj=9_000_000)
    source = NvmlSource("n", nvml=FakeNvml([gpu]))
    first = values(source.read(TS)[0])["energy_j"]
    gpu.energy_mj = 1_000  # driver reloaded: a new counter
    second = values(source.read(TS)[0])["energy_j"]

    assert (first, second) == (9000.0, 1.0)


def test_it_records_the_processes_holding_each_gpu():
    gpu = FakeGpu("GPU-a", processes=[(4242, 2 * 2**30), (77, None)])
    [reading] = NvmlSource("n", nvml=FakeNvml([gpu])).read(TS)

    assert [(h.holder, h.pid, h.used_mem_mib) for h in reading.holders] == [
        ("pid:4242", 4242, 2048), ("pid:77", 77, None)]


def test_it_reads_sm_activity_from_gpm_from_the_second_tick():
    gpu = FakeGpu("GPU-a", gpm_sm_util=41.5)
    source = NvmlSource("n", nvml=FakeNvml([gpu]))

    first = values(source.read(TS)[0])["sm_active_pct"]
    second = values(source.read(TS)[0])["sm_active_pct"]

    assert (first, second) == (None, 41.5)


def test_a_field_the_gpu_does_not_support_is_empty_and_the_rest_still_read(caplog):
    gpu = FakeGpu("GPU-a", energy_mj=FakeGpu.NOT_SUPPORTED, temp_c=FakeGpu.NOT_SUPPORTED)
    source = NvmlSource("n", nvml=FakeNvml([gpu]))

    v = values(source.read(TS)[0])

    assert v["energy_j"] is None and v["temp_c"] is None
    assert v["power_w"] == 300.0


def test_without_a_driver_it_says_so_clearly():
    with pytest.raises(SourceError, match="NVML library .* not found: this machine has no NVIDIA driver"):
        NvmlSource("n", nvml=FakeNvml([FakeGpu("GPU-a")], library_missing=True))


def test_a_failing_gpu_is_reported_once_and_the_others_go_on(caplog):
    good, bad = FakeGpu("GPU-good"), FakeGpu("GPU-bad")
    source = NvmlSource("n", nvml=FakeNvml([good, bad]))
    bad.lost = True

    with caplog.at_level(logging.INFO, logger="collector.agent"):
        first = source.read(TS)
        second = source.read(TS)
        bad.lost = False
        third = source.read(TS)

    assert [r.device.uuid for r in first] == ["GPU-good"]
    assert [r.device.uuid for r in second] == ["GPU-good"]
    assert [r.device.uuid for r in third] == ["GPU-good", "GPU-bad"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["GPU 1 (GPU-bad) failed to read: GPU is lost; skipping it until it answers again"]


def test_a_gpu_that_cannot_be_opened_is_skipped_at_start(caplog):
    broken = FakeGpu("GPU-broken")
    broken.fail_on_open = True
    source = NvmlSource("n", nvml=FakeNvml([FakeGpu("GPU-ok"), broken]))

    assert [r.device.uuid for r in source.read(TS)] == ["GPU-ok"]
    assert "GPU 1 cannot be read" in caplog.text


def test_close_frees_gpm_samples_and_shuts_nvml_down():
    nvml = FakeNvml([FakeGpu("GPU-a", gpm_sm_util=10.0)])
    source = NvmlSource("n", nvml=nvml)
    source.read(TS)
    source.read(TS)
    source.close()

    assert nvml.freed == 2
    assert not nvml.initialized


def test_each_holder_carries_its_ancestors_and_launcher_ids_read_from_the_real_process():
    env = {**os.environ, "TORCHELASTIC_RUN_ID": "run-9", "SLURM_JOB_ID": "77"}
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        gpu = FakeGpu("GPU-a", processes=[(rank.pid, 2**30)])
        [reading] = NvmlSource("n", nvml=FakeNvml([gpu])).read(TS)
    finally:
        rank.kill()
        rank.wait()

    [holder] = reading.holders
    assert (holder.pid, holder.used_mem_mib) == (rank.pid, 1024)
    assert holder.ancestors[0] == os.getpid()
    assert holder.launcher_ids == {"TORCHELASTIC_RUN_ID": "run-9", "SLURM_JOB_ID": "77"}


# -- what newer GPUs report: one profile each for a Hopper, a Blackwell superchip and a Rubin superchip ---------


def two_ticks(gpu, change=None):
    """Read twice, a second apart on the device's clock (GPM and NVLink rates need two samples)."""
    source = NvmlSource("node-a", nvml=FakeNvml([gpu]))
    first = values(source.read(TS)[0])
    gpu.clock_us += 1_000_000
    if change:
        change(gpu)
    reading = source.read(TS)[0]
    return first, values(reading), reading.device


def more_nvlink(gpu):
    gpu.nvlink_tx_kib += 2_048  # 2 MiB sent in the second
    gpu.nvlink_rx_kib += 1_024


def test_a_rubin_superchip_reports_module_and_memory_power_module_energy_tensor_activity_and_nvlink():
    first, second, device = two_ticks(FakeGpu.rubin_superchip("GPU-r"), more_nvlink)

    assert (device.arch, device.mig_mode, device.power_scopes) == ("rubin", False, "module,memory")
    assert (second["power_w"], second["module_power_w"], second["memory_power_w"]) == (1500.0, 1900.0, 160.0)
    assert second["module_energy_j"] == 20_000_000.0  # 2e10 mJ
    assert (second["sm_active_pct"], second["tensor_active_pct"], second["sm_occupancy_pct"]) == (75.0, 62.0, 50.0)
    assert (second["nvlink_tx_bytes_s"], second["nvlink_rx_bytes_s"]) == (2_097_152.0, 1_048_576.0)
    assert second["power_limit_w"] == 1800.0
    # The first tick has no earlier sample to take GPM or NVLink rates from.
    assert first["tensor_active_pct"] is None and first["nvlink_tx_bytes_s"] is None
    assert first["module_power_w"] == 1900.0


def test_a_blackwell_superchip_has_the_module_scope_and_a_power_capped_clock_shows_in_its_reasons():
    capped = fake_pynvml.nvmlClocksEventReasonSwPowerCap | fake_pynvml.nvmlClocksEventReasonSwThermalSlowdown
    _, second, device = two_ticks(FakeGpu.blackwell_superchip("GPU-b"),
                                  lambda gpu: setattr(gpu, "clocks_event_reasons", capped))

    assert (device.arch, device.power_scopes) == ("blackwell", "module,memory")
    assert second["module_power_w"] == 1150.0 and second["clock_event_reasons"] == 0x24
    assert second["clock_event_reasons"] & schema.THROTTLE_MASK


def test_a_hopper_has_tensor_activity_and_nvlink_but_no_module_scope_and_says_so_once(caplog):
    caplog.set_level(logging.INFO, logger="collector.agent")
    _, second, device = two_ticks(FakeGpu.hopper("GPU-h"), more_nvlink)

    assert (device.arch, device.power_scopes) == ("hopper", "")
    assert (second["module_power_w"], second["memory_power_w"], second["module_energy_j"]) == (None, None, None)
    assert second["tensor_active_pct"] == 35.0 and second["nvlink_tx_bytes_s"] == 2_097_152.0


def test_an_ampere_without_gpm_or_field_values_gives_none_never_a_zero_or_an_error():
    gpu = FakeGpu.ampere("GPU-a", field_values=False, clocks_event_reasons=FakeGpu.NOT_SUPPORTED,
                         power_limit_mw=FakeGpu.NOT_SUPPORTED)
    _, second, device = two_ticks(gpu)

    assert (device.arch, device.mig_mode, device.power_scopes) == ("ampere", False, "")
    new = ("module_power_w", "memory_power_w", "module_energy_j", "tensor_active_pct", "sm_occupancy_pct",
           "nvlink_tx_bytes_s", "nvlink_rx_bytes_s", "clock_event_reasons", "power_limit_w")
    assert {k: second[k] for k in new} == dict.fromkeys(new)
    assert second["power_w"] == 300.0, "the fields it has still read"


def test_a_field_that_stops_being_supported_is_dropped_and_a_counter_reset_gives_no_rate():
    gpu = FakeGpu.rubin_superchip("GPU-r")
    source = NvmlSource("node-a", nvml=FakeNvml([gpu]))
    source.read(TS)
    gpu.clock_us += 1_000_000
    gpu.memory_power_mw = None  # the device now answers NOT_SUPPORTED for it
    gpu.nvlink_tx_kib = 5  # the counter restarted (driver reload)
    second = values(source.read(TS)[0])
    assert second["memory_power_w"] is None and second["nvlink_tx_bytes_s"] is None
    assert [name for name, _ in source.devices[0].fields] == ["module_power", "module_energy", "nvlink_tx", "nvlink_rx"]
    gpu.clock_us += 1_000_000
    gpu.nvlink_tx_kib += 1
    assert values(source.read(TS)[0])["nvlink_tx_bytes_s"] == 1024.0


def test_a_mig_enabled_gpu_says_so():
    [reading] = NvmlSource("node-a", nvml=FakeNvml([FakeGpu.hopper("GPU-m", mig_mode=fake_pynvml.NVML_DEVICE_MIG_ENABLE)])).read(TS)
    assert reading.device.mig_mode is True


# -- health: XID errors, uncorrected ECC errors, row remapping ------------------------------------------------


def test_xid_errors_ecc_and_row_remapping_become_events_critical_where_the_gpu_needs_a_reset():
    from collector.agent.sources import nvml as nvml_source

    sick, well = FakeGpu.hopper("GPU-sick"), FakeGpu.hopper("GPU-well", xid_events=False)
    fake = FakeNvml([sick, well])
    source = NvmlSource("node-a", nvml=fake)
    assert [e for r in source.read(TS) for e in r.events] == [], "a healthy start reports nothing"

    fake.xid(source.event_set, sick, 79)  # fallen off the bus: critical
    fake.xid(source.event_set, sick, 13)  # a graphics engine exception: recorded, not critical
    sick.ecc_uncorrected = 2
    sick.remapped_rows = (0, 1, 1, 0)
    events = {}
    for _ in range(nvml_source.HEALTH_EVERY):  # ECC and the remapper are read every HEALTH_EVERY ticks
        for reading in source.read(TS):
            events.setdefault(reading.device.uuid, []).extend(reading.events)

    assert events["GPU-sick"] == [
        ("xid", 79, "XID 79", True), ("xid", 13, "XID 13", False),
        ("ecc_uncorrected", 2, "2 more uncorrected ECC errors (2 since the driver loaded)", True),
        ("row_remap_pending", 1, "a row remapping is pending: the GPU needs a reset", True),
        ("rows_remapped", 1, "1 more rows remapped for uncorrectable errors", False),
    ]
    assert events["GPU-well"] == [], "a GPU without XID events still reads, and reports nothing"
    source.close()
    assert source.event_set.freed


def test_a_gpu_in_mig_mode_is_one_device_whose_utilization_nvml_does_not_give_and_whose_power_it_does():
    """NVML enumerates physical GPUs: a MIG-partitioned GPU is one device (counted once, as the dcgm source counts
    its instances once); in MIG mode NVML answers NOT_SUPPORTED for whole-GPU utilization, which stays empty."""
    gpu = FakeGpu.hopper("GPU-mig", mig_mode=fake_pynvml.NVML_DEVICE_MIG_ENABLE, util_gpu=FakeGpu.NOT_SUPPORTED,
                         processes=[(4242, 10 * 2**30), (4343, 20 * 2**30)])
    [reading] = NvmlSource("node-a", nvml=FakeNvml([gpu])).read(TS)

    assert reading.device.mig_mode is True
    v = values(reading)
    assert v["util_pct"] is None and v["power_w"] == 300.0 and v["energy_j"] == 5_000_000.0
    assert sorted(h.pid for h in reading.holders) == [4242, 4343], "each instance's processes hold the one GPU"

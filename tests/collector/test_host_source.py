"""The host source: this machine's CPU as a device, power estimated and flagged."""

from datetime import datetime, timezone

import pytest

from collector.agent import schema
from collector.agent.sources.host import IDLE_SHARE, HostSource
from tests.waiting import wait_for

TS = datetime(2025, 1, 1, tzinfo=timezone.utc)


def test_it_measures_utilization_and_memory_and_flags_power_as_estimated():
    [reading] = HostSource("this-host", cpu_tdp_w=100).read(TS)
    v = dict(zip(schema.SAMPLE_FIELDS, reading.values))

    assert reading.device.source == "host"
    assert reading.device.power_estimated is True
    assert reading.device.simulated is False
    assert reading.device.uuid.startswith("CPU-")
    assert 0 <= v["util_pct"] <= 100
    assert 0 < v["mem_used_mib"] <= v["mem_total_mib"]
    assert IDLE_SHARE * 100 <= v["power_w"] <= 100


def test_its_power_estimate_scales_between_idle_and_tdp():
    source = HostSource("h", cpu_tdp_w=200)

    assert source.power_w(0) == pytest.approx(200 * IDLE_SHARE)
    assert source.power_w(100) == pytest.approx(200)


def test_its_energy_counter_integrates_the_estimate_over_time():
    times = iter([0.0, 10.0])
    source = HostSource("h", cpu_tdp_w=100, clock=lambda: next(times))
    first = dict(zip(schema.SAMPLE_FIELDS, source.read(TS)[0].values))
    second = dict(zip(schema.SAMPLE_FIELDS, source.read(TS)[0].values))

    assert first["energy_j"] == 0
    assert second["energy_j"] == pytest.approx(10 * (first["power_w"] + second["power_w"]) / 2)


def test_the_same_machine_keeps_the_same_device_uuid():
    assert HostSource("h").info.uuid == HostSource("h").info.uuid


def test_it_rejects_a_tdp_that_is_not_positive():
    with pytest.raises(ValueError, match="cpu_tdp_w must be > 0, got -5"):
        HostSource("h", cpu_tdp_w=-5)


def test_busy_processes_are_recorded_as_holders_with_their_memory_and_lineage_and_idle_ones_are_not():
    import os
    import subprocess
    import sys

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], env={**os.environ, "SLURM_JOB_ID": "31"})
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        source = HostSource("h", cpu_tdp_w=100, holders_every_s=0.5)
        [first] = source.read(TS)
        assert first.holders == ()  # the first scan only takes the baseline

        def scan_with_busy():  # a read before the next scan is due (holders_every_s) has no holders
            [reading] = source.read(TS)
            return reading if any(h.pid == busy.pid for h in reading.holders) else None

        second = wait_for(scan_with_busy, 10, "a holders scan that finds the busy process")
        [between] = source.read(TS)  # no scan due yet
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()

    holders = {h.pid: h for h in second.holders}
    assert busy.pid in holders and idle.pid not in holders
    assert holders[busy.pid].holder == f"pid:{busy.pid}"
    assert holders[busy.pid].used_mem_mib > 0
    assert holders[busy.pid].ancestors[0] == os.getpid()
    assert holders[busy.pid].launcher_ids == {"SLURM_JOB_ID": "31"}
    assert between.holders == ()


def test_the_scan_after_the_agents_first_comes_a_second_later_then_every_holders_every_s():
    import subprocess
    import sys
    import time

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        source = HostSource("h", cpu_tdp_w=100)  # scans every 10 s
        started = time.monotonic()
        assert source.read(TS)[0].holders == ()  # the baseline

        def scan_with_busy():
            [reading] = source.read(TS)
            return reading if any(h.pid == busy.pid for h in reading.holders) else None

        wait_for(scan_with_busy, 5, "the second scan, a second after the first, to find the busy process")
        assert time.monotonic() - started < 5
        assert source.read(TS)[0].holders == (), "the next scan is 10 s away"
    finally:
        busy.kill()
        busy.wait()

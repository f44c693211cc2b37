"""1-minute and 1-hour rollups: energy from counter deltas or power, incremental, idempotent."""

from datetime import datetime, timedelta, timezone

import pytest

from collector import store
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer
from collector.models import Rollup1h, Rollup1m

T0 = datetime(2025, 3, 1, 10, 0, tzinfo=timezone.utc)
GPU = DeviceInfo("GPU-r", "node-r", 0, "H100", "nvml")


def sample(second, power_w, energy_j=None, util=50.0):
    return ("GPU-r", T0 + timedelta(seconds=second), util, 5.0, power_w, energy_j, 100, 1000, 50.0, 1500, 30.0)


def write(conn, samples):
    Writer(conn).write(Batch([GPU], samples))


def minute(m):
    return Rollup1m.objects.get(device__uuid="GPU-r", bucket=T0 + timedelta(minutes=m))


def test_a_minute_bucket_holds_counter_deltas_samples_and_covered_seconds(pg_conn):
    # one sample a second for two minutes, counter growing 300 J/s
    write(pg_conn, [sample(s, 300.0, 1e6 + 300.0 * s) for s in range(120)])

    store.roll_up()

    first, second = minute(0), minute(1)
    assert (first.samples, first.covered_s, first.energy_j, first.energy_from) == (60, 59.0, 59 * 300.0, "counter")
    assert (second.samples, second.covered_s, second.energy_j) == (60, 60.0, 60 * 300.0)
    assert first.power_mean_w == 300.0 and first.util_max_pct == 50.0 and first.sm_active_mean_pct == 30.0


def test_a_counter_reset_counts_as_a_new_counter_never_negative_energy(pg_conn):
    samples = [sample(s, 200.0, 5e6 + 200.0 * s) for s in range(30)]
    samples += [sample(s, 200.0, 200.0 * (s - 30)) for s in range(30, 60)]  # driver reloaded at 0:30
    write(pg_conn, samples)

    store.roll_up()

    bucket = minute(0)
    # 58 counter intervals of 200 J, and the reset interval integrated from power (200 W x 1 s)
    assert bucket.energy_j == pytest.approx(59 * 200.0)
    assert bucket.energy_from == "mixed"


def test_without_a_counter_energy_is_power_integrated_by_trapezoid(pg_conn):
    write(pg_conn, [sample(0, 100.0), sample(2, 300.0), sample(3, 300.0)])

    store.roll_up()

    bucket = minute(0)
    assert bucket.energy_j == pytest.approx(2 * 200.0 + 1 * 300.0)
    assert bucket.energy_from == "power"


def test_a_gap_longer_than_five_minutes_counts_no_time_and_no_energy(pg_conn):
    write(pg_conn, [sample(0, 100.0, 0.0), sample(1, 100.0, 100.0), sample(1000, 100.0, 99999.0)])

    store.roll_up()

    late = Rollup1m.objects.get(bucket=T0 + timedelta(seconds=960))
    assert (late.covered_s, late.energy_j, late.energy_from) == (0.0, 0.0, "none")


def test_late_data_is_rolled_up_on_the_next_run_and_rerunning_changes_nothing(pg_conn):
    write(pg_conn, [sample(s, 100.0, 100.0 * s) for s in range(0, 60, 2)])
    store.roll_up()
    write(pg_conn, [sample(s, 100.0, 100.0 * s) for s in range(1, 60, 2)])  # a spool replayed late

    assert store.roll_up() == 1
    before = list(Rollup1m.objects.values())
    assert store.roll_up() == 0

    assert minute(0).samples == 60 and minute(0).energy_j == pytest.approx(5900.0)
    assert list(Rollup1m.objects.values()) == before


def test_recomputing_a_bucket_on_purpose_gives_the_same_figures(pg_conn):
    write(pg_conn, [sample(s, 100.0 + s, 1e3 + 10.0 * s) for s in range(180)])
    store.roll_up()
    before = sorted(Rollup1m.objects.values_list("bucket", "samples", "energy_j", "power_mean_w", "covered_s"))
    pg_conn.execute("INSERT INTO telemetry_rollup_pending SELECT id, %s, %s FROM collector_device", [T0, T0])

    store.roll_up()

    after = sorted(Rollup1m.objects.values_list("bucket", "samples", "energy_j", "power_mean_w", "covered_s"))
    assert after == before


def test_the_hour_bucket_sums_its_minutes(pg_conn):
    write(pg_conn, [sample(s, 100.0 if s < 120 else 400.0, None, util=10.0 if s < 120 else 90.0)
                    for s in range(0, 180)])

    store.roll_up()

    hour = Rollup1h.objects.get(bucket=T0)
    minutes = list(Rollup1m.objects.filter(bucket__lt=T0 + timedelta(hours=1)))
    assert hour.samples == 180
    assert hour.energy_j == pytest.approx(sum(m.energy_j for m in minutes))
    assert hour.covered_s == pytest.approx(179.0)
    assert hour.util_mean_pct == pytest.approx((120 * 10 + 60 * 90) / 180)
    assert hour.power_max_w == 400.0 and hour.energy_from == "power"


def newer(second, tensor, reasons, module_w=1900.0, tx=2e6):
    """A sample with the newer GPUs' fields: module and memory power, module energy, tensor activity, occupancy,
    NVLink tx and rx, clock event reasons, power limit."""
    return (*sample(second, 1500.0)[:11], module_w, 160.0, None, tensor, 50.0, tx, tx / 2, reasons, 1800.0)


def test_the_newer_gpus_figures_are_averaged_and_throttled_samples_counted_per_minute_and_hour(pg_conn):
    power_cap, idle = 0x04, 0x01
    # Minute 0: tensor cores 60% then 20%, clocks held by the power cap for 15 of 60 samples (idle for 15 more,
    # which is not a slowdown); minute 1: no reasons reported at all.
    write(pg_conn, [newer(s, 60.0 if s < 30 else 20.0, power_cap if s < 15 else idle if s < 30 else 0, tx=1e6 * s)
                    for s in range(60)]
          + [newer(60 + s, 40.0, None, module_w=1700.0) for s in range(60)])

    store.roll_up()

    first, second = minute(0), minute(1)
    assert first.tensor_active_mean_pct == pytest.approx(40.0) and first.sm_occupancy_mean_pct == 50.0
    assert (first.throttled_samples, first.reasons_samples) == (15, 60)
    assert first.module_power_mean_w == 1900.0 and first.memory_power_mean_w == 160.0
    assert first.nvlink_tx_mean_bytes_s == pytest.approx(29.5e6) and first.nvlink_rx_mean_bytes_s == pytest.approx(14.75e6)
    assert (second.throttled_samples, second.reasons_samples) == (0, 0)
    hour = Rollup1h.objects.get(device__uuid="GPU-r", bucket=T0)
    assert hour.tensor_active_mean_pct == pytest.approx(40.0) and hour.module_power_mean_w == pytest.approx(1800.0)
    assert (hour.throttled_samples, hour.reasons_samples) == (15, 60)


def test_energy_is_the_widest_scope_measured_and_a_host_cpu_inside_a_module_is_not_counted_twice(pg_conn):
    superchip = DeviceInfo("GPU-sc", "node-sc", 0, "NVIDIA GB200", "nvml", power_scopes="module,memory")
    host = DeviceInfo("CPU-sc", "node-sc", 1, "NVIDIA Grace", "host", power_estimated=True)
    plain = DeviceInfo("GPU-pl", "node-pl", 0, "NVIDIA H100", "nvml")
    host_alone = DeviceInfo("CPU-pl", "node-pl", 1, "AMD EPYC", "host", power_estimated=True)

    def row(uuid, s, gpu_counter, module_counter=None, module_w=None, power=300.0):
        # util, mem util, power, energy counter, mem used/total, temp, clock, sm active, then module power,
        # memory power, module energy counter (the rest empty)
        return (uuid, T0 + timedelta(seconds=s), 50.0, 5.0, power, gpu_counter, 100, 1000, 50.0, 1500, 30.0,
                module_w, None, module_counter)

    rows = []
    for s in range(60):
        rows.append(row("GPU-sc", s, 1e6 + 900.0 * s, module_counter=5e6 + 1200.0 * s, module_w=1200.0))
        rows.append(row("CPU-sc", s, None, power=150.0))
        rows.append(row("GPU-pl", s, 2e6 + 700.0 * s))
        rows.append(row("CPU-pl", s, None, power=100.0))
    Writer(pg_conn).write(Batch([superchip, host, plain, host_alone], rows))

    store.roll_up()

    def bucket(uuid):
        r = Rollup1m.objects.get(device__uuid=uuid, bucket=T0)
        return r.energy_j, r.energy_from, r.energy_scope

    # The module's counter (1,200 J/s), not the GPU's (900 J/s); the Grace CPU is in it; elsewhere each its own.
    assert bucket("GPU-sc") == (59 * 1200.0, "counter", "module")
    assert bucket("CPU-sc") == (0.0, "power", "in_module")
    assert bucket("GPU-pl") == (59 * 700.0, "counter", "device")
    assert bucket("CPU-pl") == (pytest.approx(59 * 100.0), "power", "device")
    assert Rollup1h.objects.get(device__uuid="GPU-sc", bucket=T0).energy_scope == "module"

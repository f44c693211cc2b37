"""Reading nvidia-smi --format=csv logs: columns from the header, units, N/A, devices."""

import io
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from collector.agent import schema
from collector.agent.smi import SmiFormatError, read_smi_log


def parse(text, **kw):
    return read_smi_log(io.StringIO(text), node=kw.pop("node", "n1"), **kw)


def field(row, name):
    return row[2 + schema.SAMPLE_FIELDS.index(name)]


def test_it_reads_the_real_h100_log_with_units_in_header_and_values(telemetry_data):
    with open(telemetry_data / "smi_h100_pcie_burst.csv") as f:
        log = read_smi_log(f, node="h100", model="NVIDIA H100 PCIe")

    assert len(log.rows) == 8491 and not log.skipped
    [device] = log.devices
    assert device.model == "NVIDIA H100 PCIe" and device.source == "smi"
    first = log.rows[0]
    assert first[1] == datetime(2023, 8, 24, 14, 41, 23, 886000, tzinfo=timezone.utc)
    assert field(first, "power_w") == 56.24  # power.draw, not power.draw.instant
    assert field(first, "sm_clock_mhz") == 345
    assert field(first, "util_pct") == 0.0
    assert field(first, "temp_c") == 59.0
    assert field(first, "energy_j") is None  # no counter in the log; rollups integrate power


def test_it_splits_devices_by_index_and_takes_the_model_from_name(telemetry_data):
    with open(telemetry_data / "smi_rtx2070_usage.csv") as f:
        log = read_smi_log(f, node="desk")

    [device] = log.devices
    assert device.model == "NVIDIA GeForce RTX 2070" and device.mem_total_mib == 8192
    assert len(log.rows) == 232
    assert field(log.rows[0], "mem_used_mib") == 754
    assert field(log.rows[0], "mem_util_pct") == 4.0
    assert field(log.rows[0], "power_w") is None


LOG = """timestamp, index, name, power.draw [W], utilization.gpu [%], memory.used [MiB]
2024/05/01 10:00:00.000, 0, NVIDIA A100, 100.00 W, 50 %, 1000 MiB
2024/05/01 10:00:00.000, 1, NVIDIA A100, [N/A], [Not Supported], 2000 MiB
timestamp, index, name, power.draw [W], utilization.gpu [%], memory.used [MiB]
2024/05/01 10:00:01.000, 0, NVIDIA A100, 200.00 W, 60 %, 1100 MiB
2024/05/01 10:00:01.000, 1, NVIDIA A100, 150.00 W, 70 %
not a time, 0, NVIDIA A100, 1 W, 1 %, 1 MiB
2024/05/01 10:00:01.000, 0, NVIDIA A100, 200.00 W, 60 %, 1100 MiB
2024/05/01 10:00:02.000, 1, NVIDIA A100, lots, 70 %, 2 GiB
"""


def test_it_skips_repeated_headers_and_bad_rows_and_says_why():
    log = parse(LOG)

    assert len(log.devices) == 2
    assert len(log.rows) == 4
    assert log.skipped == {
        "repeated header": 1,
        "wrong number of columns (expected 6)": 1,
        "unreadable timestamp": 1,
        "repeats the timestamp of an earlier row of the same device": 1,
    }
    assert log.empty_values == {"power.draw [W]": 1}


def test_na_and_not_supported_become_empty_and_units_convert():
    log = parse(LOG)
    gpu1 = [r for r in log.rows if r[0] == log.devices[1].uuid]

    assert field(gpu1[0], "power_w") is None and field(gpu1[0], "util_pct") is None
    assert field(gpu1[1], "mem_used_mib") == 2048  # "2 GiB"


def test_columns_may_come_in_any_order_and_subset():
    log = parse("utilization.gpu [%], timestamp\n7 %, 2024/05/01 10:00:00\n")

    [row] = log.rows
    assert field(row, "util_pct") == 7.0
    assert log.devices[0].model == "unknown (nvidia-smi log)"


def test_timestamps_are_read_in_the_given_time_zone():
    log = parse("timestamp, power.draw [W]\n2024/05/01 10:00:00.000, 1 W\n", tz=ZoneInfo("Europe/Paris"))

    assert log.rows[0][1] == datetime(2024, 5, 1, 8, 0, tzinfo=timezone.utc)


def test_the_same_node_and_index_always_give_the_same_device_uuid():
    assert parse(LOG).devices == parse(LOG).devices
    assert parse(LOG).devices[0].uuid != parse(LOG, node="other").devices[0].uuid


def test_a_log_without_timestamps_is_refused_with_the_reason():
    with pytest.raises(SmiFormatError, match="no timestamp column"):
        parse("index, power.draw [W]\n0, 1 W\n")


def test_a_noheader_log_without_times_is_refused_as_data_not_read_as_a_strange_header():
    # `--format=csv,noheader,nounits --query-gpu=index,utilization.gpu,...`: values where names would be
    with pytest.raises(SmiFormatError, match=r"the first line is data, not a header \(0, 0, 0, \.\.\.\).*"
                                             r"--columns .*which must include timestamp"):
        parse("0, 0, 0, 4095, 10, 4085, 42, 33\n1, [Not Supported], [Not Supported], 1023, 722, 301, 30, 37\n")

"""Real nvidia-smi logs from public repositories (tests/data/telemetry/SOURCES.md) import right, or are
refused with what to do: noheader logs, hand-written headers, ISO 8601 times, several GPUs, damaged files."""

import io
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from collector.agent import schema
from collector.agent.smi import SmiFormatError, parse_columns, read_smi_log
from collector.models import Device, Sample

# What the OmniOpt docs say their noheader logs were written with (--query-gpu=...).
A100_COLUMNS = ("timestamp, name, pci.bus_id, driver_version, pstate, pcie.link.gen.max, pcie.link.gen.current, "
                "temperature.gpu, utilization.gpu [%], utilization.memory [%], memory.total [MiB], "
                "memory.free [MiB], memory.used [MiB]")


def run(*args):
    out = StringIO()
    call_command("import_smi", *map(str, args), stdout=out)
    return out.getvalue()


def read(path, **kw):
    with open(path, newline="", encoding="utf-8") as f:
        return read_smi_log(f, node=kw.pop("node", "n1"), **kw)


def value(row, name):
    return row[2 + schema.SAMPLE_FIELDS.index(name)]


# -- 2. --format=csv,noheader --------------------------------------------------------------


def test_a_noheader_log_is_refused_with_the_option_that_reads_it(db, telemetry_data):
    with pytest.raises(CommandError) as err:
        run(telemetry_data / "smi_a100x3_noheader.csv", "--node", "slurm-a100")

    message = str(err.value)
    assert "the first line is data, not a header" in message and "noheader" in message
    assert '--columns "timestamp,name,..."' in message and "--query-gpu" in message
    assert "no timestamp column" not in message  # column 1 is a timestamp
    assert Sample.objects.count() == 0


def test_a_noheader_log_imports_with_the_columns_it_was_logged_with(db, telemetry_data):
    out = run(telemetry_data / "smi_a100x3_noheader.csv", "--node", "slurm-a100", "--columns", A100_COLUMNS)

    assert "imported 8 samples for 3 device(s) on node slurm-a100" in out
    assert "devices told apart by the pci.bus_id column" in out
    assert "columns not imported (no stored figure for them): driver_version, pstate, " in out
    devices = list(Device.objects.order_by("index"))
    assert [d.model for d in devices] == ["NVIDIA A100-SXM4-40GB"] * 3
    assert [d.mem_total_mib for d in devices] == [40960] * 3
    # 00000000:8B:00.0 at 11:27:15.309: "42, 3 %, 0 %, 40960 MiB, 1534 MiB, 38803 MiB"
    s = Sample.objects.get(ts=datetime(2024, 6, 1, 11, 27, 15, 309000, tzinfo=timezone.utc))
    assert (s.temp_c, s.util_pct, s.mem_util_pct, s.mem_used_mib) == (42.0, 3.0, 0.0, 38803)
    # two GPUs stamped 11:27:15.311 are two samples, not a repeat
    assert Sample.objects.filter(ts=datetime(2024, 6, 1, 11, 27, 15, 311000, tzinfo=timezone.utc)).count() == 2


# -- 3. hand-written headers ----------------------------------------------------------------


def test_a_hand_written_header_without_spaces_before_units_is_understood(telemetry_data):
    log = read(telemetry_data / "smi_a5000_handwritten_header.csv")

    [device] = log.devices
    assert device.model == "NVIDIA RTX A5000" and device.mem_total_mib == 24564
    assert len(log.rows) == 22 and not log.skipped
    first = log.rows[0]  # 2025/05/25 00:13:19.084, 0, NVIDIA RTX A5000, 10, 24564, 11325, 12909, 72
    assert (value(first, "util_pct"), value(first, "mem_used_mib"), value(first, "temp_c")) == (10.0, 11325, 72.0)
    assert log.unused_columns == ["memory.free[MiB]"]


def test_units_written_as_the_last_word_of_a_name_are_understood(db, telemetry_data):
    out = run(telemetry_data / "smi_rtx4090_4080_suffix_units.csv", "--node", "baikal")

    assert "imported 16 samples for 2 device(s) on node baikal" in out and "devices told apart by the gpu_id column" in out
    assert "columns not imported" not in out
    gpus = {d.index: d for d in Device.objects.all()}
    assert (gpus[0].model, gpus[0].mem_total_mib, gpus[1].model, gpus[1].mem_total_mib) == (
        "NVIDIA GeForce RTX 4090", 24564, "NVIDIA GeForce RTX 4080", 16376)
    # 07:03:45.811, gpu 0: utilization 80 %, memory 65 %, 10602 MiB, 47 C, 190.54 W
    s = Sample.objects.get(device=gpus[0], ts=datetime(2026, 3, 28, 7, 3, 45, 811000, tzinfo=timezone.utc))
    assert (s.util_pct, s.mem_util_pct, s.mem_used_mib, s.temp_c, s.power_w) == (80.0, 65.0, 10602, 47.0, pytest.approx(190.54))


def test_a_log_whose_columns_name_no_stored_figure_is_refused_naming_them(telemetry_data):
    text = (telemetry_data / "smi_a5000_handwritten_header.csv").read_text(encoding="utf-8")
    # The same log, had its author named the figures in words nvidia-smi does not know
    header, body = text.split("\n", 1)
    renamed = "timestamp,index,name,busy[%],vram total,vram in use,vram free,heat\n" + body

    with pytest.raises(SmiFormatError, match=r"none of the columns \(timestamp, index, name, busy\[%\], "
                                             r"vram total.*\) is a figure Yardstick stores; it reads .*utilization.gpu"):
        read_smi_log(io.StringIO(renamed), node="n")


# -- 4. ISO 8601 timestamps, and an import that stores nothing fails ------------------------


def test_iso_timestamps_keep_their_offset_and_eight_gpus_are_eight_devices(db, telemetry_data):
    out = run(telemetry_data / "smi_80gb_x8_iso_offset.csv", "--node", "gpu8", "--tz", "Europe/Paris")

    assert "imported 43 samples for 8 device(s) on node gpu8" in out
    # "index" is 0 on every row although each timestamp has 8 rows: "gpu" tells them apart
    assert "devices told apart by the gpu column" in out and "columns not imported (no stored figure for them): index" in out
    assert sorted(Device.objects.values_list("index", flat=True)) == list(range(8))
    # 2025-09-08T17:26:50+08:00, gpu 3: 4 MiB of 81559, 73.99 W, 36 C; +08:00 wins over --tz
    s = Sample.objects.get(device__index=3, ts=datetime(2025, 9, 8, 9, 26, 50, tzinfo=timezone.utc))
    assert (s.mem_used_mib, s.mem_total_mib, s.power_w, s.temp_c) == (4, 81559, pytest.approx(73.99), 36.0)


def test_an_iso_time_without_offset_is_read_in_tz():
    log = read_smi_log(io.StringIO("timestamp, power.draw [W]\n2025-09-08T17:26:50.5, 70 W\n"), node="n",
                       tz=timezone(timedelta(hours=-5)))

    assert log.rows[0][1] == datetime(2025, 9, 8, 22, 26, 50, 500000, tzinfo=timezone.utc)


def test_a_non_empty_log_that_gives_no_sample_exits_non_zero_saying_why(db, telemetry_data, tmp_path):
    text = (telemetry_data / "smi_80gb_x8_iso_offset.csv").read_text()
    path = tmp_path / "days.csv"  # the same log with its times written as days of the week
    path.write_text(text.replace("2025-09-08T", "Monday "))

    with pytest.raises(CommandError) as err:
        run(path, "--node", "gpu8")

    assert "nothing imported" in str(err.value) and "43 unreadable timestamp" in str(err.value)
    assert Sample.objects.count() == 0 and Device.objects.count() == 0


# -- 5. what real logs contain --------------------------------------------------------------


def test_crlf_line_ends_and_a_byte_order_mark_read_like_the_plain_file(db, telemetry_data, tmp_path):
    plain = telemetry_data / "smi_rtx4090_vlm.csv"
    windows = tmp_path / "windows.csv"  # as Excel or PowerShell saves it
    windows.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))

    assert read(windows).rows == read(plain).rows
    out = run(windows, "--node", "rtx")
    assert "imported 30 samples for 1 device(s)" in out and "skipped 0 rows" in out
    assert Device.objects.get().model == "NVIDIA GeForce RTX 4090"


def test_a_log_cut_off_mid_line_skips_the_cut_line_and_keeps_the_rest(db, telemetry_data, tmp_path):
    text = (telemetry_data / "smi_rtx4090_vlm.csv").read_text()
    cut = tmp_path / "cut.csv"  # killed while writing "... 17998 MiB, 294.95 W"
    cut.write_text(text[: text.rindex("294.95 W") + 2])

    out = run(cut, "--node", "rtx")

    assert "imported 29 samples" in out
    assert "1 last line cut off (no line end: the log was still being written)" in out
    assert not Sample.objects.filter(power_w__lt=30).exists()  # never "29" W from "294.95 W"


def test_nounits_values_read_in_the_headers_units(telemetry_data):
    log = read(telemetry_data / "smi_80gb_x8_iso_offset.csv")  # memory.used, power.draw: plain numbers

    assert {value(r, "mem_total_mib") for r in log.rows} == {81559}
    assert value(log.rows[0], "power_w") == 74.01


def test_na_not_supported_and_unknown_error_are_empty_and_a_uuid_column_names_the_device():
    # nvidia-smi's own words for a value it cannot read, as it prints them in a row
    log = read_smi_log(io.StringIO(
        "timestamp, uuid, name, power.draw [W], utilization.gpu [%], temperature.gpu\n"
        "2024/05/01 10:00:00.000, GPU-aaaa, NVIDIA RTX A6000, [N/A], [Not Supported], 31\n"
        "2024/05/01 10:00:00.000, GPU-bbbb, NVIDIA RTX A6000, 25.02 W, 30 %, [Unknown Error]\n"
    ), node="n")

    assert [d.uuid for d in log.devices] == ["GPU-aaaa", "GPU-bbbb"]
    a, b = log.rows
    assert (value(a, "power_w"), value(a, "util_pct"), value(a, "temp_c")) == (None, None, 31.0)
    assert (value(b, "power_w"), value(b, "util_pct"), value(b, "temp_c")) == (25.02, 30.0, None)
    assert not log.empty_values  # empty, not "unreadable"


def test_columns_that_disagree_with_the_files_own_header_are_refused(telemetry_data):
    with pytest.raises(SmiFormatError, match="has its own header .* differs from --columns; leave out --columns"):
        read(telemetry_data / "smi_rtx4090_vlm.csv", columns=parse_columns("timestamp,power.draw"))

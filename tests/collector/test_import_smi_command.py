"""`manage.py import_smi FILE --node NAME`: real nvidia-smi logs in, energy integrated, re-import adds nothing."""

import csv
from datetime import datetime, timezone
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from collector import store
from collector.models import Device, Rollup1h, Rollup1m, Sample


def run(*args):
    out = StringIO()
    call_command("import_smi", *map(str, args), stdout=out)
    return out.getvalue()


def independent_energy_j(path):
    """Trapezoid of power.draw over the timestamps, computed straight from the CSV."""
    with open(path) as f:
        rows = list(csv.DictReader(f, skipinitialspace=True))
    t = [datetime.strptime(r["timestamp"], "%Y/%m/%d %H:%M:%S.%f") for r in rows]
    p = [float(r["power.draw [W]"].split()[0]) for r in rows]
    return sum((t[i] - t[i - 1]).total_seconds() * (p[i] + p[i - 1]) / 2 for i in range(1, len(rows)))


def test_the_h100_log_imports_and_its_stored_energy_matches_an_independent_integration(db, telemetry_data):
    path = telemetry_data / "smi_h100_pcie_burst.csv"

    out = run(path, "--node", "h100-box", "--model", "NVIDIA H100 PCIe", "--label", "team=infra")
    store.roll_up()

    assert "imported 8491 samples for 1 device(s) on node h100-box" in out
    assert "skipped 0 rows" in out
    device = Device.objects.select_related("node").get()
    assert (device.model, device.source, device.node.owner) == ("NVIDIA H100 PCIe", "smi", "infra")
    expected = independent_energy_j(path)
    assert expected > 20_000
    assert sum(Rollup1m.objects.values_list("energy_j", flat=True)) == pytest.approx(expected, rel=1e-9)
    assert sum(Rollup1h.objects.values_list("energy_j", flat=True)) == pytest.approx(expected, rel=1e-9)
    assert set(Rollup1m.objects.values_list("energy_from", flat=True)) == {"power"}
    assert Sample.objects.count() == 8491


def test_a_second_import_of_the_same_file_adds_nothing(db, telemetry_data):
    path = telemetry_data / "smi_a100_pcie_burst.csv"
    run(path, "--node", "a100-box")

    out = run(path, "--node", "a100-box")

    assert "imported 0 samples" in out
    assert "2938 samples were already stored" in out
    assert Sample.objects.count() == 2938 and Device.objects.count() == 1


def test_the_rtx_log_splits_by_index_and_names_its_model(db, telemetry_data):
    out = run(telemetry_data / "smi_rtx2070_usage.csv", "--node", "desk")

    assert "imported 232 samples" in out
    assert Device.objects.get().model == "NVIDIA GeForce RTX 2070"
    first = Sample.objects.order_by("ts").first()
    assert first.ts == datetime(2023, 6, 22, 18, 53, 36, 635000, tzinfo=timezone.utc)
    assert (first.util_pct, first.mem_used_mib, first.mem_total_mib, first.power_w) == (16.0, 754, 8192, None)


def test_it_reports_each_kind_of_skipped_row(db, tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(
        "timestamp, index, power.draw [W]\n"
        "2024/05/01 10:00:00.000, 0, 100.00 W\n"
        "timestamp, index, power.draw [W]\n"
        "yesterday, 0, 100.00 W\n"
        "2024/05/01 10:00:01.000, 0\n"
        "2099/05/01 10:00:01.000, 0, 100.00 W\n"
    )

    out = run(path, "--node", "n")

    assert "imported 1 samples" in out
    assert "skipped 4 rows:" in out
    for reason in ("1 repeated header", "1 unreadable timestamp", "1 wrong number of columns (expected 3)",
                   "1 stamped more than 5 minutes in the future"):
        assert reason in out


def test_a_missing_file_or_bad_time_zone_is_a_clear_error(db, tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        run(tmp_path / "nope.csv", "--node", "n")
    with pytest.raises(CommandError, match="--tz must be an IANA time zone .* got 'Mars/Base'"):
        run(tmp_path / "nope.csv", "--node", "n", "--tz", "Mars/Base")

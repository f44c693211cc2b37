"""`manage.py import_dcgm FILE --node NAME --at TIME`: a saved dcgm-exporter scrape in, through the dcgm source's parser."""

from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from collector.models import Device, Sample

AT = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)


def run(*args):
    out = StringIO()
    call_command("import_dcgm", *map(str, args), stdout=out)
    return out.getvalue()


def test_a_saved_t4_scrape_imports_as_one_sample_at_the_given_time(db, telemetry_data):
    out = run(telemetry_data / "dcgm_t4_scrape.prom", "--node", "ericsson-t4", "--at", "2026-03-01T11:00:00+01:00",
              "--label", "team=inference")

    assert "imported 1 samples for 1 device(s) on node ericsson-t4" in out
    assert "stored as node ericsson-t4 (the scrape's Hostname label says cp-bm14r7)" in out
    assert "rolled up and attributed 2026-03-01 10:00 to 2026-03-01 10:01 UTC" in out  # 11:00+01:00 is 10:00 UTC
    device = Device.objects.select_related("node").get()
    assert (device.uuid, device.model, device.source, device.node.owner) == (
        "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a", "Tesla T4", "dcgm", "inference")
    assert device.mem_total_mib == 15358  # 5120 used + 9791 free + 447 reserved
    s = Sample.objects.get()
    assert s.ts == AT
    assert (s.util_pct, s.mem_util_pct, s.power_w, s.temp_c, s.sm_clock_mhz) == (91.0, 73.0, pytest.approx(68.244), 74.0, 660)
    assert s.energy_j == pytest.approx(15152422.938)  # mJ -> J
    assert s.sm_active_pct == pytest.approx(15.6205)  # graphics-engine activity: no SM_ACTIVE in this export


def test_the_same_scrape_twice_adds_nothing_and_a_later_one_adds_a_sample(db, telemetry_data):
    path = telemetry_data / "dcgm_l40s_scrape.prom"
    run(path, "--node", "upcloud", "--at", "2026-03-01T10:00:00Z")

    again = run(path, "--node", "upcloud", "--at", "2026-03-01T10:00:00Z")
    later = run(path, "--node", "upcloud", "--at", "2026-03-01T10:00:30")  # no offset: UTC

    assert "imported 0 samples" in again and "1 samples were already stored" in again
    assert "imported 1 samples" in later
    assert list(Sample.objects.order_by("ts").values_list("ts", flat=True)) == [AT, AT + timedelta(seconds=30)]


def test_a_mig_scrape_stores_one_device_per_physical_gpu(db, telemetry_data):
    run(telemetry_data / "dcgm_a100_mig_whole_and_instance.prom", "--node", "ub20", "--at", "2026-03-01T10:00:00Z")

    device = Device.objects.get()
    assert (device.model, device.mem_total_mib) == ("unknown (dcgm-exporter)", 40535)
    assert Sample.objects.get().power_w == pytest.approx(409.692)


def test_a_file_that_is_not_a_scrape_or_a_bad_time_is_refused_naming_what_is_accepted(db, telemetry_data):
    with pytest.raises(CommandError, match=r"no dcgm-exporter GPU metric in it: expected lines like DCGM_FI_DEV_POWER_USAGE\{"):
        run(telemetry_data / "smi_rtx4090_vlm.csv", "--node", "n", "--at", "2026-03-01T10:00:00Z")
    with pytest.raises(CommandError, match="--at must be an ISO 8601 time like 2025-06-01T14:30:00Z .* got 'yesterday'"):
        run(telemetry_data / "dcgm_t4_scrape.prom", "--node", "n", "--at", "yesterday")
    with pytest.raises(CommandError, match="no such file"):
        run(telemetry_data / "missing.prom", "--node", "n", "--at", "2026-03-01T10:00:00Z")
    assert Sample.objects.count() == 0 and Device.objects.count() == 0

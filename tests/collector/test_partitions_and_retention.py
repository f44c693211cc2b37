"""Daily partitions made ahead, and retention of raw samples and rollups."""

from datetime import date, datetime, timedelta, timezone

from django.test import override_settings

from collector import store
from collector.agent import schema
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer
from collector.models import Rollup1h, Rollup1m, Sample

NOW = datetime(2025, 6, 30, 12, tzinfo=timezone.utc)
GPU = DeviceInfo("GPU-k", "n", 0, "H100", "nvml")


def partitions(conn):
    return set(schema.existing_partitions(conn.cursor()))


def write_days(conn, *days_ago):
    rows = [("GPU-k", NOW - timedelta(days=d, seconds=s), 1.0, 1.0, 100.0, 100.0 * s, 1, 1, 1.0, 1, 1.0)
            for d in days_ago for s in range(3)]
    Writer(conn).write(Batch([GPU], rows), now=NOW)


def test_it_creates_partitions_from_yesterday_to_a_week_ahead_once(pg_conn):
    created = store.create_partitions(days_ahead=7, today=date(2031, 1, 10))

    assert created[0] == "telemetry_sample_p20310109" and created[-1] == "telemetry_sample_p20310117"
    assert len(created) == 9
    assert store.create_partitions(days_ahead=7, today=date(2031, 1, 10)) == []


def test_retention_drops_raw_days_past_seven_once_rolled_up_and_keeps_hours(pg_conn):
    write_days(pg_conn, 0, 8, 100)
    before = partitions(pg_conn)
    store.roll_up()

    result = store.apply_retention(now=NOW)

    dropped = {date(2025, 6, 22), date(2025, 3, 22)}
    assert partitions(pg_conn) == before - dropped
    assert sorted(result["dropped_partitions"]) == ["telemetry_sample_p20250322", "telemetry_sample_p20250622"]
    assert Sample.objects.count() == 3
    # 1-minute rollups go after 90 days, 1-hour rollups stay
    assert not Rollup1m.objects.filter(bucket__lt=NOW - timedelta(days=90)).exists()
    assert Rollup1m.objects.filter(bucket__lt=NOW - timedelta(days=7)).exists()
    assert Rollup1h.objects.filter(bucket__lt=NOW - timedelta(days=90)).exists()


def test_a_raw_day_waiting_for_its_rollup_is_kept(pg_conn):
    write_days(pg_conn, 10)

    result = store.apply_retention(now=NOW)

    assert result["kept_pending"] == ["telemetry_sample_p20250620"]
    assert Sample.objects.count() == 3


@override_settings(TELEMETRY_RAW_DAYS=30, TELEMETRY_1M_DAYS=200, TELEMETRY_1H_DAYS=50)
def test_retention_periods_come_from_settings(pg_conn):
    write_days(pg_conn, 10, 100)
    store.roll_up()

    store.apply_retention(now=NOW)

    assert Sample.objects.count() == 3
    assert Rollup1m.objects.filter(bucket__lt=NOW - timedelta(days=90)).exists()
    assert not Rollup1h.objects.filter(bucket__lt=NOW - timedelta(days=50)).exists()

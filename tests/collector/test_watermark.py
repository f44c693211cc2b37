"""The roll-up watermark: writers mark only samples older than the line; the roll-up marks the rest.

Live samples (newer than the line) cost a writer no pending marks; moving the
line waits for every writer that read the old one, then marks what they
wrote, so no sample is ever left out of the rollups.
"""

from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from collector import store
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer
from collector.models import Device, Rollup1m

T0 = datetime(2025, 3, 1, 11, 58, tzinfo=timezone.utc)
GPU = DeviceInfo("GPU-w", "node-w", 0, "NVIDIA H100 80GB HBM3", "nvml")


def rows(start_s, count, power=300.0):
    return [("GPU-w", T0 + timedelta(seconds=start_s + i), 50.0, 10.0, power, 1000.0 + i * power, 1024, 81920,
             60.0, 1980, 40.0) for i in range(count)]


def pending(cur):
    cur.execute("SELECT hour, from_ts FROM telemetry_rollup_pending ORDER BY hour")
    return cur.fetchall()


def set_line(cur, upto):
    cur.execute("UPDATE telemetry_rollup_watermark SET upto = %s, marked_upto = %s", [upto, upto])


def line(cur):
    cur.execute("SELECT upto, marked_upto FROM telemetry_rollup_watermark")
    return cur.fetchone()


def test_samples_newer_than_the_line_get_no_pending_marks_and_the_roll_up_still_covers_them(pg_conn):
    cur = pg_conn.cursor()
    set_line(cur, T0)
    Writer(pg_conn).write(Batch([GPU], rows(60, 120)))  # 11:59:00 .. 12:00:59, all after the line

    assert pending(cur) == []

    store.roll_up(now=T0 + timedelta(minutes=5))

    assert line(cur) == (T0 + timedelta(minutes=5),) * 2
    assert [(r.bucket, r.samples) for r in Rollup1m.objects.order_by("bucket")] == [
        (T0 + timedelta(minutes=1), 60), (T0 + timedelta(minutes=2), 60)]
    assert pending(cur) == []


def test_samples_older_than_the_line_are_marked_by_the_writer_up_to_the_line(pg_conn):
    cur = pg_conn.cursor()
    noon = T0.replace(hour=12, minute=0)
    set_line(cur, noon + timedelta(seconds=30))
    # 11:59:00 .. 13:00:59: a replayed spool reaching past the line
    Writer(pg_conn).write(Batch([GPU], rows(60, 3720)))

    # Hours up to the line's only: the rest is the roll-up's to mark when it moves the line.
    assert pending(cur) == [(T0.replace(minute=0), T0 + timedelta(minutes=1)), (noon, noon)]

    store.roll_up(now=noon + timedelta(hours=2))

    assert Rollup1m.objects.filter(device__uuid="GPU-w").count() == 62
    assert pending(cur) == []


def test_the_line_moves_only_forward(pg_conn):
    cur = pg_conn.cursor()
    set_line(cur, T0)

    assert store.advance_watermark(now=T0 - timedelta(hours=1)) is True
    assert line(cur) == (T0, T0)


@pytest.fixture
def watermark(pg_dsn):
    """Autocommit psycopg connection; puts the line back where it was after the test."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        before = line(conn.cursor())
        yield conn
        conn.execute("UPDATE telemetry_rollup_watermark SET upto = %s, marked_upto = %s", list(before))


def test_the_roll_up_waits_for_a_writer_that_read_the_old_line_and_then_marks_its_samples(watermark, pg_dsn):
    cur = watermark.cursor()
    set_line(cur, T0)
    with psycopg.connect(pg_dsn, autocommit=True) as writer_conn:
        writer = Writer(writer_conn)
        with writer_conn.transaction():  # a write in flight: it saw the line at T0 and marked nothing
            writer.write(Batch([GPU], rows(60, 30)))
            assert store.advance_watermark(now=T0 + timedelta(minutes=5)) is False
            assert line(cur) == (T0, T0)
        assert pending(cur) == []

        assert store.advance_watermark(now=T0 + timedelta(minutes=5)) is True

    device_id = Device.objects.get(uuid="GPU-w").id
    cur.execute("SELECT device_id, hour, from_ts FROM telemetry_rollup_pending")
    assert cur.fetchall() == [(device_id, T0.replace(minute=0), T0)]
    assert line(cur) == (T0 + timedelta(minutes=5),) * 2

    store.roll_up(now=T0 + timedelta(minutes=5))
    assert Rollup1m.objects.get(device_id=device_id).samples == 30

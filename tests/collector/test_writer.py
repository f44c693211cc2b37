"""The writer: binary COPY, idempotent on (device, ts), latest table, pending rollups, holders."""

import logging
from datetime import datetime, timedelta, timezone

import pytest

from collector.agent import schema
from collector.agent.batch import Batch, DeviceInfo, Holder
from collector.agent.writer import Writer
from collector.models import Device, DeviceHolder, LatestSample, Node, Sample

T0 = datetime(2025, 3, 1, 11, 58, tzinfo=timezone.utc)
GPU0 = DeviceInfo("GPU-0", "node-a", 0, "NVIDIA H100 80GB HBM3", "nvml", mem_total_mib=81920)
GPU1 = DeviceInfo("GPU-1", "node-a", 1, "NVIDIA H100 80GB HBM3", "nvml", mem_total_mib=81920)


def rows(device, start_s, count, power=300.0):
    return [
        (device.uuid, T0 + timedelta(seconds=start_s + i), 50.0, 10.0, power, 1000.0 + i * power, 1024, 81920,
         60.0, 1980, 40.0)
        for i in range(count)
    ]


def pending(conn):
    return conn.execute("SELECT device_id, hour, from_ts FROM telemetry_rollup_pending ORDER BY 1, 2").fetchall()


def test_it_registers_the_node_and_devices_and_stores_every_sample(pg_conn):
    result = Writer(pg_conn).write(
        Batch([GPU0, GPU1], rows(GPU0, 0, 3) + rows(GPU1, 0, 3), labels={"team": "rl"}, interval_s=1.0)
    )

    assert (result.inserted, result.duplicates) == (6, 0)
    node = Node.objects.get()
    assert (node.name, node.labels, node.owner, node.interval_s) == ("node-a", {"team": "rl"}, "rl", 1.0)
    assert list(Device.objects.values_list("uuid", "index", "source")) == [("GPU-0", 0, "nvml"), ("GPU-1", 1, "nvml")]
    assert Sample.objects.count() == 6
    sample = Sample.objects.get(device__uuid="GPU-0", ts=T0)
    assert (sample.power_w, sample.energy_j, sample.sm_active_pct) == (300.0, 1000.0, 40.0)


def test_a_replayed_batch_adds_nothing_and_new_rows_in_it_still_land(pg_conn):
    writer = Writer(pg_conn)
    writer.write(Batch([GPU0], rows(GPU0, 0, 5)))

    again = writer.write(Batch([GPU0], rows(GPU0, 0, 5)))
    overlapping = writer.write(Batch([GPU0], rows(GPU0, 3, 5)))

    assert (again.inserted, again.duplicates) == (0, 5)
    assert (overlapping.inserted, overlapping.duplicates) == (3, 2)
    assert Sample.objects.count() == 8


def test_the_latest_table_keeps_the_newest_sample_even_when_older_data_arrives_later(pg_conn):
    writer = Writer(pg_conn)
    writer.write(Batch([GPU0], rows(GPU0, 100, 1, power=700.0)))
    writer.write(Batch([GPU0], rows(GPU0, 0, 10, power=200.0)))  # a spool replayed late

    latest = LatestSample.objects.get(device__uuid="GPU-0")
    assert latest.ts == T0 + timedelta(seconds=100)
    assert latest.power_w == 700.0


def test_it_marks_every_hour_a_batch_touched_for_the_rollup(pg_conn):
    Writer(pg_conn).write(Batch([GPU0], rows(GPU0, 60, 180)))  # 11:59:00 .. 12:01:59
    device_id = Device.objects.get().id

    assert pending(pg_conn) == [
        (device_id, T0.replace(minute=0), T0 + timedelta(seconds=60)),
        (device_id, T0.replace(hour=12, minute=0), T0.replace(hour=12, minute=0)),
    ]


def test_it_rejects_samples_more_than_five_minutes_in_the_future(pg_conn, caplog):
    now = T0
    batch = Batch([GPU0], rows(GPU0, 0, 2) + rows(GPU0, 301, 1) + rows(GPU0, 3600, 1))

    with caplog.at_level(logging.WARNING, logger="collector.agent"):
        result = Writer(pg_conn).write(batch, now=now)

    assert (result.inserted, result.rejected_future) == (2, 2)
    assert "rejected 2 samples stamped more than 5 minutes in the future" in caplog.text


def test_it_creates_the_partition_of_a_day_that_has_none(pg_conn):
    old = DeviceInfo("GPU-old", "node-a", 0, "V100", "smi")
    long_ago = datetime(2019, 6, 1, 12, tzinfo=timezone.utc)

    Writer(pg_conn).write(Batch([old], [("GPU-old", long_ago, *([None] * 9))]))

    assert pg_conn.execute("SELECT to_regclass('telemetry_sample_p20190601') IS NOT NULL").fetchone()[0]
    assert Sample.objects.filter(ts=long_ago).count() == 1


def test_it_records_who_holds_each_device_and_for_how_long(pg_conn):
    writer = Writer(pg_conn)
    writer.write(Batch([GPU0], rows(GPU0, 0, 1), holders=[("GPU-0", T0, Holder("pid:42", 42, 1000))]))
    writer.write(Batch([GPU0], rows(GPU0, 5, 1), holders=[("GPU-0", T0 + timedelta(seconds=5), Holder("pid:42", 42, 3000))]))

    holder = DeviceHolder.objects.get()
    assert (holder.holder, holder.pid, holder.used_mem_mib) == ("pid:42", 42, 3000)
    assert (holder.first_seen, holder.last_seen) == (T0, T0 + timedelta(seconds=5))


def test_it_records_each_holders_ancestors_and_launcher_ids_as_last_seen(pg_conn):
    writer = Writer(pg_conn)
    writer.write(Batch([GPU0], rows(GPU0, 0, 1), holders=[("GPU-0", T0, Holder("pid:42", 42, 1000))]))
    lineage = Holder("pid:42", 42, 1000, ancestors=(41, 40), launcher_ids={"SLURM_JOB_ID": "4242"})
    writer.write(Batch([GPU0], rows(GPU0, 5, 1), holders=[("GPU-0", T0 + timedelta(seconds=5), lineage)]))

    holder = DeviceHolder.objects.get()
    assert (holder.ancestor_pids, holder.launcher_ids) == ([41, 40], {"SLURM_JOB_ID": "4242"})
    assert DeviceHolder.objects.filter(launcher_ids__contains={"SLURM_JOB_ID": "4242"}).count() == 1


def test_a_batch_spooled_before_lineage_was_recorded_still_reads_and_writes(pg_conn):
    spooled = Batch([GPU0], rows(GPU0, 0, 1), holders=[("GPU-0", T0, Holder("pid:42", 42, 1000))]).to_json()
    spooled["holders"] = [h[:5] for h in spooled["holders"]]  # the old five-field holder

    Writer(pg_conn).write(Batch.from_json(spooled))

    holder = DeviceHolder.objects.get()
    assert (holder.pid, holder.ancestor_pids, holder.launcher_ids) == (42, [], {})


def test_a_device_that_moves_to_another_node_is_re_registered(pg_conn):
    writer = Writer(pg_conn)
    writer.write(Batch([GPU0], rows(GPU0, 0, 1)))
    moved = DeviceInfo("GPU-0", "node-b", 3, GPU0.model, "nvml")
    writer.write(Batch([moved], rows(moved, 1, 1)))

    device = Device.objects.select_related("node").get()
    assert (device.node.name, device.index) == ("node-b", 3)


def test_a_sample_for_an_unlisted_device_is_a_clear_error(pg_conn):
    with pytest.raises(ValueError, match="sample for device 'GPU-1', which the batch does not list"):
        Writer(pg_conn).write(Batch([GPU0], rows(GPU1, 0, 1)))


def test_a_batch_out_of_time_order_still_marks_its_oldest_hour_and_keeps_its_newest_row(pg_conn):
    shuffled = rows(GPU0, 60, 180)  # 11:59:00 .. 12:01:59
    shuffled = shuffled[90:] + shuffled[:90]
    Writer(pg_conn).write(Batch([GPU0], shuffled))
    device_id = Device.objects.get().id

    assert pending(pg_conn) == [
        (device_id, T0.replace(minute=0), T0 + timedelta(seconds=60)),
        (device_id, T0.replace(hour=12, minute=0), T0.replace(hour=12, minute=0)),
    ]
    assert LatestSample.objects.get().ts == T0 + timedelta(seconds=239)


def test_the_latest_row_keeps_missing_values_as_null_and_follows_each_batch(pg_conn):
    writer = Writer(pg_conn)
    writer.write(Batch([GPU0, GPU1], rows(GPU0, 0, 2) + rows(GPU1, 0, 2)))
    partial = [(GPU0.uuid, T0 + timedelta(seconds=5), 70.0, None, 310.0, None, None, None, None, None, None)]
    writer.write(Batch([GPU0, GPU1], partial + rows(GPU1, 5, 1, power=111.0)))

    latest = {s.device.uuid: s for s in LatestSample.objects.select_related("device")}
    assert (latest["GPU-0"].ts, latest["GPU-0"].util_pct, latest["GPU-0"].power_w) == (T0 + timedelta(seconds=5), 70.0, 310.0)
    assert latest["GPU-0"].energy_j is None and latest["GPU-0"].sm_active_pct is None
    assert (latest["GPU-1"].ts, latest["GPU-1"].power_w) == (T0 + timedelta(seconds=5), 111.0)


def test_an_autocommit_writer_keeps_the_latest_table_right_across_batches_and_replays(telemetry_dsn):
    import psycopg

    with psycopg.connect(telemetry_dsn, autocommit=True) as conn:
        writer = Writer(conn)
        writer.write(Batch([GPU0], rows(GPU0, 0, 3)))
        writer.write(Batch([GPU0, GPU1], rows(GPU0, 3, 3) + rows(GPU1, 3, 3, power=222.0)))  # GPU-1 is new
        writer.write(Batch([GPU0], rows(GPU0, 0, 3)))  # a replay: adds nothing, moves nothing back
        got = conn.execute(
            "SELECT d.uuid, l.ts, l.power_w FROM telemetry_latest l JOIN collector_device d ON d.id = l.device_id ORDER BY 1"
        ).fetchall()
        stored = conn.execute("SELECT count(*) FROM telemetry_sample").fetchone()[0]

    assert got == [("GPU-0", T0 + timedelta(seconds=5), 300.0), ("GPU-1", T0 + timedelta(seconds=5), 222.0)]
    assert stored == 9


@pytest.mark.parametrize("sm_active, records", [
    ([40.0, 41.0], True),  # every column all values: one array of telemetry_mark rows
    ([None, None], True),  # a column all NULL (no GPM on these GPUs): still rows
    ([40.0, None], False),  # a column mixing both: one array per column
])
def test_the_latest_rows_are_stored_whichever_way_the_marks_travel(pg_conn, sm_active, records):
    from collector.agent import writer as writer_module

    batch_rows = [r[:-1] + (sm,) for r, sm in zip(rows(GPU0, 0, 1) + rows(GPU1, 5, 1), sm_active)]
    writer = Writer(pg_conn)
    sent = []
    original = writer_module._Accepted.mark

    def spy(self, record_oid=None):
        marks = original(self, record_oid)
        sent.append(len(marks[0]))
        return marks

    writer_module._Accepted.mark = spy
    try:
        writer.write(Batch([GPU0, GPU1], batch_rows))
    finally:
        writer_module._Accepted.mark = original

    # One array of rows, or one per column (device, ts, each sample field, lo); the last try (the first ones made
    # the day's partition).
    assert sent[-1] == (1 if records else 3 + len(schema.SAMPLE_FIELDS))
    latest = {l.device.uuid: l for l in LatestSample.objects.select_related("device")}
    assert (latest["GPU-0"].ts, latest["GPU-1"].ts) == (T0, T0 + timedelta(seconds=5))
    assert [latest["GPU-0"].sm_active_pct, latest["GPU-1"].sm_active_pct] == sm_active
    assert latest["GPU-1"].power_w == 300.0 and latest["GPU-1"].mem_total_mib == 81920


def test_the_fleets_binary_read_of_the_latest_rows_gives_what_a_row_read_gives(pg_conn):
    from collector import store

    odd = (GPU1.uuid, T0 + timedelta(seconds=1, microseconds=123_457), None, 10.0, 312.7, 1000.0, 1024, 81920,
           60.0, 1980, 40.0)
    Writer(pg_conn).write(Batch([GPU0, GPU1], rows(GPU0, 0, 1, power=299.9) + [odd]))
    pg_conn.execute("UPDATE telemetry_latest SET clock_event_reasons = 4 WHERE device_id = "
                    "(SELECT id FROM collector_device WHERE uuid = 'GPU-0')")

    got = {int(r["device_id"]): r for r in store.latest_values()}
    ids = dict(Device.objects.values_list("uuid", "id"))
    zero, one = got[ids["GPU-0"]], got[ids["GPU-1"]]
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert int(one["ts_us"]) == (odd[1] - epoch) // timedelta(microseconds=1)
    # A real column's value as a row read gives it (312.7, not the float4's 312.70001220703125), NULL as NaN or 0.
    assert float(one["power_w"]) == 312.7 and float(zero["power_w"]) == 299.9
    assert float(zero["util_pct"]) == 50.0 and one["util_pct"] != one["util_pct"]
    assert (int(zero["clock_event_reasons"]), int(one["clock_event_reasons"])) == (4, 0)


def test_a_write_runs_without_jit(pg_conn):
    """The marks' statement, costed past jit_above_cost on made-up estimates, spent 200 ms of a 260 ms write
    compiling itself on a server with LLVM: the write turns JIT off for its own transaction. (Its NOTIFY to the
    live fleet: tests/dashboard/test_live_fleet.py.)"""
    pg_conn.execute("SET LOCAL jit = on")
    Writer(pg_conn).write(Batch([GPU0], rows(GPU0, 0, 2)))
    # The writer's transaction is a savepoint of the test's: what it set locally holds until that one ends.
    assert pg_conn.execute("SHOW jit").fetchone()[0] == "off"

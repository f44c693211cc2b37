"""Incremental attribution: a run reads only what changed since the last one, and misses none of it.

Each run takes a snapshot before it reads; the next asks for the rollups written by transactions that
snapshot did not see (collector.store.rollups_written_since). These tests commit each write, as the
collector, the roll-up and attribution do in production, so the snapshots are real ones.
"""

from datetime import timedelta
from decimal import Decimal

import psycopg
from cost_builders import utc
from django.db.models import Sum

from collector import store
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer
from collector.models import Device, Rollup1m
from costs.attribution import attribute
from costs.models import Allocation

T0 = utc(2025, 5, 1, 12, 0)
GPU = DeviceInfo("GPU-late", "n-late", 0, "NVIDIA H100 80GB HBM3", "nvml")


def rows():
    return sorted(Allocation.objects.values_list("device_id", "minute", "job_id", "team", "device_s", "energy_j"),
                  key=lambda r: (r[0], r[1], r[2] or 0))


def sample(ts, power=300.0):
    seconds = (ts - T0).total_seconds()
    return ("GPU-late", ts, 50.0, 10.0, power, 1000.0 + seconds * power, 1024, 81920, 60.0, 1980, 40.0)


def every_second(start_s, end_s, skip=()):
    return [sample(T0 + timedelta(seconds=s)) for s in range(start_s, end_s) if s not in skip]


def test_a_late_sample_replayed_into_an_attributed_minute_is_charged_once(fleet, pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE telemetry_rollup_watermark SET upto = %s, marked_upto = %s", [T0, T0])
        writer = Writer(conn)
        writer.write(Batch([GPU], every_second(0, 1200, skip={210})), now=T0 + timedelta(minutes=20))
        job = fleet.job("j", "red")
        fleet.stint(job, Device.objects.get(uuid="GPU-late"), T0 - timedelta(hours=1))
        store.roll_up(now=T0 + timedelta(minutes=20))
        attribute(now=T0 + timedelta(minutes=20, seconds=1))
        minute3 = T0 + timedelta(minutes=3)
        assert Rollup1m.objects.get(bucket=minute3).samples == 59

        # The spool replays the sample of 12:03:30 behind the live ones: the writer marks its hour pending.
        writer.write(Batch([GPU], every_second(1200, 1320) + every_second(210, 211)), now=T0 + timedelta(minutes=22))
        store.roll_up(now=T0 + timedelta(minutes=22))
        summary = attribute(now=T0 + timedelta(minutes=22, seconds=1))

        rollup = Rollup1m.objects.get(bucket=minute3)
        charged = Allocation.objects.filter(minute=minute3)
        assert rollup.samples == 60 and summary["late_minutes"] == 1
        assert list(charged.values_list("job_id", "rollup_samples")) == [(job.pk, 60)]
        assert charged.get().device_s == Decimal(repr(rollup.covered_s)).quantize(Decimal("1e-15"))
        assert charged.get().energy_j == Decimal(repr(rollup.energy_j)).quantize(Decimal("1e-15"))
        once = rows()

        # Replayed again (a reply lost after the commit): nothing is stored twice, nothing charged twice.
        writer.write(Batch([GPU], every_second(210, 211)), now=T0 + timedelta(minutes=22))
        store.roll_up(now=T0 + timedelta(minutes=22, seconds=30))
        again = attribute(now=T0 + timedelta(minutes=22, seconds=31))

    assert again["late_minutes"] == 0 and rows() == once
    total = Allocation.objects.filter(job=job).aggregate(s=Sum("device_s"))["s"]
    assert total == sum(Decimal(repr(r.covered_s)).quantize(Decimal("1e-15"))
                        for r in Rollup1m.objects.filter(bucket__lt=T0 + timedelta(minutes=22)))


def test_a_rollup_written_while_the_last_run_read_is_attributed_by_the_next(fleet, pg_dsn):
    gpu = fleet.device(fleet.node("n1", team="infra"))
    fleet.minutes(gpu, T0, 5, power_w=100)
    attribute(now=T0 + timedelta(minutes=5))
    # A roll-up that began before the next run took its snapshot and commits after it.
    with psycopg.connect(pg_dsn) as rolling:
        rolling.execute("UPDATE telemetry_rollup_1m SET samples = 61, energy_j = 9999 WHERE bucket = %s",
                        [T0 + timedelta(minutes=2)])
        attribute(now=T0 + timedelta(minutes=6))
        assert Allocation.objects.get(minute=T0 + timedelta(minutes=2)).energy_j == Decimal(6000)
        rolling.commit()

    summary = attribute(now=T0 + timedelta(minutes=7))

    assert summary["late_minutes"] == 1
    assert Allocation.objects.get(minute=T0 + timedelta(minutes=2)).energy_j == Decimal(9999)


def test_a_run_rewrites_only_the_minutes_closed_since_the_last_and_the_figures_are_a_full_runs(fleet, clean_telemetry):
    node = fleet.node("n1", team="infra")
    gpus = [fleet.device(node) for _ in range(3)]
    for gpu in gpus:
        fleet.minutes(gpu, T0, 30, power_w=100)
    job = fleet.job("j", "red")
    fleet.stint(job, gpus[0], T0 + timedelta(seconds=90), T0 + timedelta(minutes=25))
    attribute(now=T0 + timedelta(minutes=20))

    summary = attribute(now=T0 + timedelta(minutes=21))

    assert summary["rows"] == 3 and summary["late_minutes"] == 0  # one new minute of each device, no lookback
    incremental = rows()
    attribute(now=T0 + timedelta(minutes=21), since=T0)
    assert rows() == incremental


def test_a_rollup_that_arrives_after_its_minute_was_attributed_is_charged(fleet, clean_telemetry):
    node = fleet.node("n1", team="infra")
    ahead, behind = fleet.device(node), fleet.device(node)
    fleet.minutes(ahead, T0, 5, power_w=100)
    fleet.minutes(behind, T0, 3, power_w=100)
    attribute(now=T0 + timedelta(minutes=5))
    assert not Allocation.objects.filter(device=behind, minute__gte=T0 + timedelta(minutes=3)).exists()

    fleet.minutes(behind, T0 + timedelta(minutes=3), 2, power_w=100)  # the roll-up of that node was behind
    attribute(now=T0 + timedelta(minutes=6))

    assert Allocation.objects.filter(device=behind).aggregate(s=Sum("device_s"))["s"] == Decimal(300)


def test_a_stint_that_starts_in_attributed_minutes_recomputes_its_device_only(fleet, clean_telemetry):
    node = fleet.node("n1", team="infra")
    held, other = fleet.device(node), fleet.device(node)
    for gpu in (held, other):
        fleet.minutes(gpu, T0, 20, power_w=100)
    attribute(now=T0 + timedelta(minutes=20))
    other_rows = set(Allocation.objects.filter(device=other).values_list("pk", flat=True))

    # Recorded late, as a tracked run's stint is: it began 15 minutes back.
    job = fleet.job("late start", "red")
    fleet.stint(job, held, T0 + timedelta(minutes=5))
    attribute(now=T0 + timedelta(minutes=21))

    assert Allocation.objects.filter(job=job).aggregate(s=Sum("device_s"))["s"] == Decimal(15 * 60)  # minutes 5 to 19
    assert set(Allocation.objects.filter(device=other).values_list("pk", flat=True)) >= other_rows


def test_the_first_run_after_the_upgrade_looks_back_as_before(fleet, clean_telemetry):
    from costs.models import AttributionState

    gpu = fleet.device(fleet.node("n1"))
    fleet.minutes(gpu, T0, 60, power_w=100)
    attribute(now=T0 + timedelta(minutes=60))
    AttributionState.objects.update(rollups_seen=None)  # as a database migrated from before the snapshot is
    Rollup1m.objects.filter(device=gpu, bucket=T0 + timedelta(minutes=3)).update(samples=61, energy_j=9999.0)

    summary = attribute(now=T0 + timedelta(minutes=61))

    assert summary["late_minutes"] == 1 and AttributionState.objects.get().rollups_seen
    assert Allocation.objects.get(device=gpu, minute=T0 + timedelta(minutes=3)).energy_j == Decimal(9999)


def test_jobs_started_together_are_recomputed_from_their_start_once_not_at_every_run_of_the_lookback(
        fleet, clean_telemetry):
    node = fleet.node("n1", team="infra")
    gpus = [fleet.device(node) for _ in range(4)]
    for gpu in gpus:
        fleet.minutes(gpu, T0, 30, power_w=100)
    attribute(now=T0 + timedelta(minutes=15))
    jobs = [fleet.job(f"j{i}", "red") for i in range(2)]
    for i, gpu in enumerate(gpus[:3]):  # three GPUs held from minute 13, one of them released at 16
        fleet.stint(jobs[i % 2], gpu, T0 + timedelta(minutes=13), T0 + timedelta(minutes=16) if i == 2 else None)

    first = attribute(now=T0 + timedelta(minutes=17))
    later = [attribute(now=T0 + timedelta(minutes=m)) for m in (18, 19, 20)]

    assert first["rows"] == 4 * 2 + 3 * 2  # the two new minutes of each GPU, and minutes 13 and 14 of the held
    assert [s["rows"] for s in later] == [4, 4, 4]  # within the lookback, and still only the new minutes
    incremental = rows()
    attribute(now=T0 + timedelta(minutes=20), since=T0)
    assert rows() == incremental


def test_a_stint_committed_after_a_run_read_newer_ones_is_still_recomputed(fleet, clean_telemetry):
    from costs.models import AttributionState

    node = fleet.node("n1", team="infra")
    gpu = fleet.device(node)
    fleet.minutes(gpu, T0, 30, power_w=100)
    attribute(now=T0 + timedelta(minutes=20))
    job = fleet.job("late commit", "red")
    stint = fleet.stint(job, gpu, T0 + timedelta(minutes=14), T0 + timedelta(minutes=18))
    # As if the run had read a newer stint while this one's transaction was still open: its id is behind.
    AttributionState.objects.update(last_stint_id=stint.pk)

    attribute(now=T0 + timedelta(minutes=21))

    assert Allocation.objects.filter(job=job).aggregate(s=Sum("device_s"))["s"] == Decimal(4 * 60)

"""Attribution over rollup minutes and stints: incremental, idempotent, cpu stints, crashes found late, late data."""

from datetime import timedelta
from decimal import Decimal

from cost_builders import utc
from django.db.models import Sum

from collector.models import Rollup1m
from costs.attribution import attribute
from costs.models import Allocation

T0 = utc(2025, 5, 1, 12, 0)


def held(job, **filters):
    return Allocation.objects.filter(job=job, **filters).aggregate(s=Sum("device_s"))["s"] or Decimal(0)


def idle_s(**filters):
    return Allocation.objects.filter(job__isnull=True, **filters).aggregate(s=Sum("device_s"))["s"] or Decimal(0)


def rows():
    return sorted(Allocation.objects.values_list("device_id", "minute", "job_id", "device_s", "energy_j"),
                  key=lambda r: (r[0], r[1], r[2] or 0))


def test_running_it_twice_writes_the_same_rows(fleet):
    node = fleet.node("n1", team="infra")
    gpu = fleet.device(node)
    fleet.minutes(gpu, T0, 10, power_w=100)
    job = fleet.job("j", "red")
    fleet.stint(job, gpu, T0 + timedelta(seconds=90), T0 + timedelta(minutes=5))

    attribute(now=T0 + timedelta(minutes=11))
    first = rows()
    attribute(now=T0 + timedelta(minutes=11))
    attribute(now=T0 + timedelta(minutes=11), since=T0)

    assert rows() == first
    assert held(job) == Decimal(210) and idle_s() == Decimal(390)


def test_a_cpu_stint_is_charged_to_the_host_device_of_its_node(fleet):
    node = fleet.node("worker-7")
    cpu = fleet.device(node, model="AMD EPYC 7763", source="host", power_estimated=True)
    other = fleet.device(fleet.node("worker-8"), model="AMD EPYC 7763", source="host")
    fleet.minutes(cpu, T0, 3, power_w=80)
    fleet.minutes(other, T0, 3, power_w=80)
    job = fleet.job("cpu job", "red")
    fleet.stint(job, cpu, T0, T0 + timedelta(minutes=3))

    attribute(now=T0 + timedelta(minutes=5))

    assert held(job, device=cpu) == Decimal(180)
    assert held(job, device=other) == 0 and idle_s(device=other) == Decimal(180)
    assert set(Allocation.objects.filter(job__isnull=True).values_list("team", flat=True)) == {"unassigned"}


def test_an_open_stint_that_turns_out_to_have_crashed_earlier_gives_the_minutes_back_to_idle(fleet):
    gpu = fleet.device(fleet.node("n1", team="infra"))
    fleet.minutes(gpu, T0, 20, power_w=100)
    job = fleet.job("j", "red")
    stint = fleet.stint(job, gpu, T0)  # open: held until now
    attribute(now=T0 + timedelta(minutes=20))
    assert held(job) == Decimal(1200)

    # The crash detector finds it 15 minutes late and ends the stint at the last heartbeat.
    stint.ended_at = T0 + timedelta(minutes=4)
    stint.save()
    attribute(now=T0 + timedelta(minutes=21))

    assert held(job) == Decimal(240) and idle_s() == Decimal(960)


def test_a_rollup_minute_that_grew_after_it_was_attributed_is_attributed_again(fleet):
    gpu = fleet.device(fleet.node("n1"))
    fleet.minutes(gpu, T0, 60, power_w=100)
    attribute(now=T0 + timedelta(minutes=60))
    # Replayed samples land in an old minute, well behind the lookback.
    Rollup1m.objects.filter(device=gpu, bucket=T0 + timedelta(minutes=3)).update(samples=61, energy_j=9999.0)
    attribute(now=T0 + timedelta(minutes=61))

    assert Allocation.objects.get(device=gpu, minute=T0 + timedelta(minutes=3)).energy_j == Decimal(9999)


def test_a_backfill_keeps_the_charges_of_minutes_whose_rollups_are_past_their_retention(fleet):
    gpu = fleet.device(fleet.node("n1", team="infra"))
    fleet.minutes(gpu, T0, 4, power_w=100)
    job = fleet.job("j", "red")
    fleet.stint(job, gpu, T0, T0 + timedelta(minutes=4))
    attribute(now=T0 + timedelta(minutes=5))
    assert held(job) == Decimal(240)

    # The 1-minute rollups of the first two minutes go (collector.store.apply_retention deletes by bucket);
    # a backfill over all four recomputes the two it can and keeps the others' rows, each minute once.
    Rollup1m.objects.filter(bucket__lt=T0 + timedelta(minutes=2)).delete()
    attribute(now=T0 + timedelta(minutes=5), since=T0)

    assert held(job) == Decimal(240)
    assert sorted(m for _, m, *_ in rows()) == [T0 + timedelta(minutes=k) for k in range(4)]

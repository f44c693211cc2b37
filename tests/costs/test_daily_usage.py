"""The allocations summed per device and day (DailyUsage): what usage reads must equal summing the minutes.

Triggers on costs_allocation keep the sums; usage reads whole days from them and the part of a day a
period cuts from the minutes. Every period below is checked against the minutes summed directly.
"""

from datetime import timedelta
from decimal import Decimal

from cost_builders import utc
from django.db import connection

from collector.models import Rollup1m
from costs.attribution import attribute
from costs.ledger import usage
from costs.models import DailyUsage

T0 = utc(2025, 5, 1, 22, 0)  # two hours before midnight: periods cut days in every way

BY_MINUTE = """
SELECT a.device_id, (a.minute AT TIME ZONE 'UTC')::date AS day, a.job_id, a.team,
       array_agg(DISTINCT a.energy_from), sum(a.device_s), sum(a.energy_j), array_agg(DISTINCT a.energy_scope)
FROM costs_allocation a WHERE a.minute >= %s AND a.minute < %s AND (%s::int[] IS NULL OR a.job_id = ANY(%s))
GROUP BY a.device_id, day, a.job_id, a.team
"""


def KEY(row):
    return row[1], row[0], row[2] is None, row[2] or 0, row[3]


def summed_from_minutes(start, end, job_ids=None):
    with connection.cursor() as cur:
        cur.execute(BY_MINUTE, [start or utc(1970, 1, 1), end or utc(2100, 1, 1), job_ids, job_ids])
        return sorted(((d, day, j, team, frozenset(f), s, e, frozenset(sc)) for d, day, j, team, f, s, e, sc
                       in cur.fetchall()), key=KEY)


def read(start, end, job_ids=None):
    """usage's rows in its own order, which is (day, device, job with idle last)."""
    return [(u.device_id, u.day, u.job_id, u.team, u.energy_from, u.device_s, u.energy_j, u.energy_scope)
            for u in usage(start, end, job_ids=job_ids)]


def periods():
    midnight = utc(2025, 5, 2)
    marks = [None, T0, T0 + timedelta(minutes=37), midnight - timedelta(minutes=1), midnight,
             midnight + timedelta(minutes=13), midnight + timedelta(hours=1, minutes=59), utc(2025, 5, 3), None]
    for i, start in enumerate(marks[:-1]):
        for end in marks[i + 1:]:
            yield start, end


def build(fleet):
    node = fleet.node("n1", team="infra")
    gpus = [fleet.device(node), fleet.device(node), fleet.device(node, model="AMD EPYC 7763", source="host")]
    for i, gpu in enumerate(gpus):
        fleet.minutes(gpu, T0, 240, power_w=100 + i, energy_from="counter" if i else "power")
    red, blue = fleet.job("red job", "red"), fleet.job("blue job", "blue")
    fleet.stint(red, gpus[0], T0 + timedelta(seconds=90), T0 + timedelta(hours=2, minutes=30))
    fleet.stint(blue, gpus[0], T0 + timedelta(hours=1), T0 + timedelta(hours=3))  # shares the GPU a while
    fleet.stint(blue, gpus[2], T0)  # the CPU, open
    return gpus, red, blue


def assert_every_period_matches(jobs):
    for start, end in periods():
        assert read(start, end) == summed_from_minutes(start, end), (start, end)
    for start, end in [(None, None), (T0 + timedelta(minutes=37), utc(2025, 5, 2, 0, 13))]:
        for job_ids in ([jobs[0].pk], [j.pk for j in jobs]):
            assert read(start, end, job_ids) == summed_from_minutes(start, end, job_ids), (start, end, job_ids)


def test_usage_by_day_equals_the_minutes_summed_for_every_cut_of_the_days(fleet):
    gpus, red, blue = build(fleet)
    attribute(now=T0 + timedelta(hours=3))  # a day cut by the last run: today, up to now

    assert DailyUsage.objects.filter(day=utc(2025, 5, 2).date()).exists()
    assert_every_period_matches([red, blue])

    attribute(now=T0 + timedelta(hours=4))
    assert_every_period_matches([red, blue])


def test_minutes_recomputed_or_removed_leave_the_sums_exact(fleet):
    gpus, red, blue = build(fleet)
    attribute(now=T0 + timedelta(hours=4))
    # Late samples change minutes on both sides of midnight; the whole of it recomputed again.
    Rollup1m.objects.filter(device=gpus[0], bucket__in=[T0 + timedelta(minutes=119), T0 + timedelta(minutes=121)]) \
        .update(samples=61, energy_j=12345.678901)
    attribute(now=T0 + timedelta(hours=4, minutes=1))
    attribute(now=T0 + timedelta(hours=4, minutes=1), since=T0)
    assert_every_period_matches([red, blue])

    with connection.cursor() as cur:
        cur.execute("DELETE FROM costs_allocation WHERE minute >= %s", [T0 + timedelta(hours=3)])
    assert_every_period_matches([red, blue])
    assert not DailyUsage.objects.filter(day=utc(2025, 5, 2).date(), minutes__lt=0).exists()

    with connection.cursor() as cur:
        cur.execute("TRUNCATE costs_allocation")
    assert not DailyUsage.objects.exists() and usage() == []


def test_a_day_summed_holds_exactly_its_minutes(fleet):
    gpus, red, blue = build(fleet)
    attribute(now=T0 + timedelta(hours=4))

    red_days = DailyUsage.objects.filter(job=red).order_by("day")
    assert [d.minutes for d in red_days] == [119, 30]  # from 22:01 (its first half minute) to 00:29
    assert sum(d.device_s for d in red_days) == sum(u.device_s for u in usage(job_ids=[red.pk])) > Decimal(0)
    assert all(d.from_power == d.minutes and d.scope_device == d.minutes for d in red_days)

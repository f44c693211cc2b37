"""Property: over random fleets, stints and price changes, jobs + idle = fleet to the cent, and nothing is lost.

Each example builds a fleet in a savepoint (rolled back after), attributes it,
and checks every grouping of the report against an independent pricing of
the raw rollups written here.
"""

import fnmatch
from datetime import date, timedelta
from decimal import Decimal

from cost_builders import Fleet, utc
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costs.attribution import attribute
from costs.models import Allocation, PriceEntry
from costs.report import GROUPS, Period, build

START = utc(2025, 1, 1, 23, 57)  # six minutes across midnight: prices may change in the middle
MINUTES = 6
MODELS = ["NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "NVIDIA Rubin", "AMD EPYC 7763"]  # the last: host CPU
PATTERNS = ["*", "*H100*", "*A100*", "cpu", "NVIDIA*", "*Rubin*"]
DAYS = [date(2024, 12, 31), date(2025, 1, 1), date(2025, 1, 2)]

money = st.decimals(min_value=0, max_value=20, places=2)
devices = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(MODELS), st.booleans()), min_size=1, max_size=4)
minutes = st.lists(st.tuples(st.booleans(), st.floats(0, 60), st.floats(0, 45000)), min_size=MINUTES,
                   max_size=MINUTES)
stints = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(-90, MINUTES * 60),
                            st.one_of(st.none(), st.integers(0, 400))), max_size=6)
prices = st.lists(st.tuples(st.sampled_from(PATTERNS), money, st.decimals(0, 1, places=3),
                            st.decimals(1, 2, places=2), st.sampled_from(DAYS)), min_size=1, max_size=5,
                  unique_by=lambda p: (p[0], p[4]))


def independent_price(model, source, day, entries):
    key = "cpu" if source == "host" else model
    best = None
    for e in entries:
        if e.effective_from > day or not fnmatch.fnmatchcase(key.lower(), e.pattern.lower()):
            continue
        rank = (sum(c not in "*?[]" for c in e.pattern), [-ord(c) for c in e.pattern], e.effective_from)
        if best is None or rank > best[0]:
            best = (rank, e)
    return best and best[1]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(devices=devices, telemetry=st.lists(minutes, min_size=4, max_size=4), stints=stints, prices=prices,
       cut=st.integers(0, MINUTES - 1))
def test_jobs_plus_idle_equal_the_fleet_total_to_the_cent_for_any_fleet(db, devices, telemetry, stints, prices,
                                                                         cut):
    with transaction.atomic():
        PriceEntry.objects.all().delete()
        for pattern, per_hour, per_kwh, pue, day in prices:
            PriceEntry.objects.create(pattern=pattern, usd_per_hour=per_hour, usd_per_kwh=per_kwh, pue=pue,
                                      effective_from=day)
        fleet = Fleet()
        nodes = [fleet.node("n0", team="infra"), fleet.node("n1")]
        devs = []
        for i, (node, model, simulated) in enumerate(devices):
            source = "host" if model.startswith("AMD") else "nvml"
            if source == "host" and any(d.source == "host" and d.node_id == nodes[node].pk for d in devs):
                source = "nvml"  # one host device per node
            dev = fleet.device(nodes[node], model=model, source=source, simulated=simulated,
                               power_estimated=source == "host")
            devs.append(dev)
            for m, (present, covered, joules) in enumerate(telemetry[i]):
                if present:
                    fleet.minutes(dev, START + timedelta(minutes=m), 1, covered_s=covered, energy_j=joules)
        jobs = [fleet.job(f"job {k}", team) for k, team in enumerate(("red", "blue", "red"))]
        for job_k, dev_k, start_s, length_s in stints:
            dev = devs[dev_k % len(devs)]
            begin = START + timedelta(seconds=start_s)
            fleet.stint(jobs[job_k], dev, begin, None if length_s is None else begin + timedelta(seconds=length_s))
        now = START + timedelta(minutes=MINUTES + 1)
        attribute(now=now, since=START)

        # Every rollup minute is charged in full: its rows sum to the rollup exactly.
        from collector.models import Rollup1m

        for r in Rollup1m.objects.all():
            sums = Allocation.objects.filter(device_id=r.device_id, minute=r.bucket).aggregate(
                s=Sum("device_s"), j=Sum("energy_j"))
            assert sums["s"] == Decimal(repr(r.covered_s)).quantize(Decimal("1e-15"))
            assert sums["j"] == Decimal(repr(r.energy_j)).quantize(Decimal("1e-15"))

        period = Period(START + timedelta(minutes=cut), now)
        entries = list(PriceEntry.objects.all())
        exact = Decimal(0)
        for r in Rollup1m.objects.filter(bucket__gte=period.start).select_related("device"):
            price = independent_price(r.device.model, r.device.source, r.bucket.date(), entries)
            if price:
                exact += Decimal(repr(r.covered_s)) * price.usd_per_hour / 3600
                exact += Decimal(repr(r.energy_j)) * price.usd_per_kwh * price.pue / 3_600_000

        same = set()
        for group in GROUPS:
            report = build(period, group)
            t = report.totals
            same.add((t["attributed_usd"], t["idle_usd"], t["fleet_usd"]))
            assert abs(t["attributed_usd"] + t["idle_usd"] - t["fleet_usd"]) <= Decimal("0.01")  # each rounded apart
            assert sum((row["total_usd"] for row in report.rows), Decimal(0)) == t["fleet_usd"]
            assert sum((row["attributed_usd"] for row in report.rows), Decimal(0)) == t["attributed_usd"]
            assert sum((row["idle_usd"] for row in report.rows), Decimal(0)) == t["idle_usd"]
            assert abs(t["fleet_usd"] - exact) <= Decimal("0.005"), (group, t["fleet_usd"], exact)
            if any(d.simulated for d in devs if Rollup1m.objects.filter(device=d, bucket__gte=period.start).exists()):
                assert t["simulated"]
        assert len(same) == 1, f"the totals depend on the grouping: {same}"
        transaction.set_rollback(True)

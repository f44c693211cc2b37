"""The cost review's rounding (costs/report.py): attributed and idle each rounded as a column of its own, so their
totals are their unrounded totals rounded whatever the grouping, and rows still add up."""

from decimal import ROUND_HALF_UP, Decimal

from costs.report import Row, round_cells, totals

CENT = Decimal("0.01")


def rows_of(amounts, group="job"):
    """A Row per (job device $, job energy $, idle device $, idle energy $), unrounded."""
    out = []
    for i, (jd, je, idd, ie) in enumerate(amounts):
        row = Row(group=group, key=str(i), label=str(i))
        row.exact.update(job_device_usd=Decimal(jd), job_energy_usd=Decimal(je), idle_device_usd=Decimal(idd),
                         idle_energy_usd=Decimal(ie))
        out.append(row)
    return out


def table(rows):
    round_cells(rows)
    values = [r.values() for r in rows]
    return values, totals(rows, values)


def test_many_small_rows_do_not_move_dollars_from_idle_to_attributed():
    # 100 rows of $0.007 attributed and $0.004 idle: rounded together, every attributed cell took a cent
    # (largest remainders) and the attributed total read $1.00 for $0.70 charged.
    values, t = table(rows_of([("0.007", "0", "0.004", "0")] * 100))
    assert (t["attributed_usd"], t["idle_usd"], t["fleet_usd"]) == (Decimal("0.70"), Decimal("0.40"), Decimal("1.10"))
    assert Decimal(t["attributed_exact_usd"]) == Decimal("0.7") and Decimal(t["idle_exact_usd"]) == Decimal("0.4")
    assert sum(v["attributed_usd"] for v in values) == t["attributed_usd"]
    assert sum(v["total_usd"] for v in values) == t["fleet_usd"]


def test_the_totals_are_the_same_by_team_and_by_job():
    # The walk's day: a job's $0.017695 beside $120.604827 of idle; by team the card read "$0.01 / unrounded $0.02".
    by_job = rows_of([("0.008848", "0.008847", "0", "0"), ("0", "0", "60.302414", "60.302413")])
    by_team = rows_of([("0.008848", "0.008847", "60.302414", "0"), ("0", "0", "0", "60.302413")], group="team")
    (_, a), (_, b) = table(by_job), table(by_team)
    for t in (a, b):
        assert (t["attributed_usd"], t["idle_usd"], t["fleet_usd"]) == (Decimal("0.02"), Decimal("120.60"),
                                                                        Decimal("120.62"))
        assert t["attributed_usd"] == Decimal(t["attributed_exact_usd"]).quantize(CENT, ROUND_HALF_UP)
        assert t["idle_usd"] == Decimal(t["idle_exact_usd"]).quantize(CENT, ROUND_HALF_UP)
    for t in (a, b):
        assert t["device_cost_usd"] + t["energy_cost_usd"] == t["attributed_usd"] + t["idle_usd"]
        assert min(t["device_cost_usd"], t["energy_cost_usd"]) >= 0


def test_each_card_is_its_own_amount_rounded_though_they_then_miss_a_cent():
    # $0.0025 attributed, $0.0025 idle: $0.00 and $0.00, and the fleet's $0.005 reads $0.01
    _, t = table(rows_of([("0.0025", "0", "0", "0"), ("0", "0", "0.0025", "0")]))
    assert (t["attributed_usd"], t["idle_usd"], t["fleet_usd"]) == (Decimal("0.00"), Decimal("0.00"), Decimal("0.01"))

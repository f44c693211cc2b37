"""Splitting one device-minute among the jobs that held it (costs.attribution.split_minute)."""

from decimal import Decimal as D

from costs.attribution import split_minute


def test_back_to_back_jobs_get_their_own_seconds_and_idle_gets_the_rest():
    rows = split_minute(60.0, 600.0, {1: [(D(0), D(15))], 2: [(D(15), D(45))]})

    assert rows == [(1, 15.0, D("15.000000000000000"), D("150.000000000000000")),
                    (2, 30.0, D("30.000000000000000"), D("300.000000000000000")),
                    (None, 15.0, D("15.000000000000000"), D("150.000000000000000"))]


def test_two_jobs_holding_a_device_at_once_split_it_and_leave_no_idle_row():
    rows = split_minute(60.0, 900.0, {1: [(D(0), D(60))], 2: [(D(0), D(60))]})

    assert [(r[0], r[2], r[3]) for r in rows] == [(1, D(30), D(450)), (2, D(30), D(450))]


def test_the_rows_of_a_minute_sum_exactly_to_the_rollup():
    rows = split_minute(59.731, 12345.678, {7: [(D(0), D("19.7"))], 8: [(D("3.1"), D("44.4"))],
                                             9: [(D(50), D(60))]})

    assert sum(r[2] for r in rows) == D("59.731") and sum(r[3] for r in rows) == D("12345.678")
    assert all(r[2] >= 0 and r[3] >= 0 for r in rows)


def test_a_job_with_two_overlapping_stints_in_a_minute_is_not_charged_twice():
    rows = split_minute(60.0, 60.0, {1: [(D(0), D(30)), (D(10), D(30))]})

    assert rows[0][:3] == (1, 30.0, D(30))
    assert rows[1][0] is None and rows[1][2] == D(30)

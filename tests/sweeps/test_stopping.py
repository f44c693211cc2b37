"""Stopping by the dollar (sweeps/stopping.py, a pure core): a running trial is stopped when its newest score is below
more than the share of earlier trials' scores at the same dollars, among at least min_trials that reached them."""

from decimal import Decimal

from sweeps.stopping import Point, judge, score_at


def curve(*pairs):
    return [Point(Decimal(str(d)), s) for d, s in pairs]


EARLIER = [(curve((0, 0), (1, 20), (2, 30), (4, 40)), Decimal(4)),
           (curve((0, 0), (1, 25), (2, 35)), Decimal(2)),
           (curve((0, 0), (1, 15), (3, 45)), Decimal(3)),
           (curve((0, 0), (2, 50)), Decimal(2))]


def test_the_score_at_dollars_is_the_newest_recorded_at_or_below_them():
    c = curve((0, 0), (1, 20), (2, 30))
    assert [score_at(c, Decimal(d)) for d in ("0", "0.5", "1", "1.99", "2", "9")] == [0, 0, 20, 20, 30, 30]
    assert score_at(curve((1, 5)), Decimal("0.5")) is None


def test_a_trial_below_most_earlier_trials_at_its_dollars_is_stopped_and_told_why():
    reason = judge(curve((0, 0), (2, 18)), EARLIER, money=lambda d: f"${d:.2f}")
    # At $2: 30, 35, 15, 50 -> three of four above 18; the lowest of them 30.
    assert reason == "stopped by the sweep: 18 points at $2.00 where 3 of 4 earlier trials had 30 or more"


def test_a_trial_at_the_median_or_above_runs_on():
    assert judge(curve((0, 0), (2, 32)), EARLIER) == "", "two of four above: not more than half"
    assert judge(curve((0, 0), (2, 60)), EARLIER) == ""


def test_only_earlier_trials_that_spent_as_much_count_and_too_few_of_them_judge_nothing():
    # At $3.5 only the first reached it (spent 4): one trial is fewer than three.
    assert judge(curve((0, 0), (3.5, 1)), EARLIER) == ""
    # At $3 two reached it (4 and 3): still fewer than three; with min_trials 2 both are above 1.
    assert judge(curve((0, 0), (3, 1)), EARLIER) == ""
    assert judge(curve((0, 0), (3, 1)), EARLIER, min_trials=2).startswith("stopped by the sweep: 1 points at 3 where "
                                                                          "2 of 2 earlier trials had 30 or more")


def test_nothing_is_judged_before_a_quarter_of_the_longest_earlier_trials_dollars():
    # The longest earlier trial spent 4: before $1 early noise is no judge.
    assert judge(curve((0, 0), (0.9, -50)), EARLIER) == ""
    reason = judge(curve((0, 0), (1, -50)), EARLIER)
    assert reason.startswith("stopped by the sweep: -50 points at 1 where 4 of 4 earlier trials had 0 or more")
    assert judge(curve((0, 0), (1, -50)), EARLIER, warmup=0.5) == ""


def test_a_first_score_alone_is_never_judged_and_a_share_can_be_stricter():
    assert judge(curve((0, -5)), EARLIER) == "", "the model it starts from, the same for every trial"
    # Three of four above 18 is not more than 0.75 of them: a stricter share lets it run.
    assert judge(curve((0, 0), (2, 18)), EARLIER, share=0.75) == ""
    assert judge(curve((0, 0), (2, 10)), EARLIER, share=0.75) != ""

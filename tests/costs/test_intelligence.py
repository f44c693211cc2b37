"""Intelligence per dollar of a job: gain, IPD, dollars per point, tokens, and the score-vs-dollars curve."""

from datetime import timedelta
from decimal import Decimal

from cost_builders import set_prices, utc

from costs.attribution import attribute
from costs.intelligence import NO_COST, NO_EVAL, NO_GAIN, OK, ipd, job_intelligence, score_cost_curve

T0 = utc(2025, 5, 1, 12, 0)


def run_job(fleet, scores):
    set_prices(("*", "6.00", "0.50", "1.0", T0.date()))  # $0.10 per device-minute, $0.50/kWh
    gpu = fleet.device(fleet.node("n1"))
    fleet.minutes(gpu, T0, 10, power_w=600)  # 36 kJ = 0.01 kWh a minute: $0.005
    job = fleet.job("j", "red")
    fleet.stint(job, gpu, T0, T0 + timedelta(minutes=10))
    fleet.evals(job, *scores)
    attribute(now=T0 + timedelta(minutes=11))
    return job


def test_a_job_that_gained_shows_ipd_dollars_per_point_and_token_figures(fleet):
    job = run_job(fleet, [(0, T0, 30.0), (5, T0 + timedelta(minutes=5), 33.0), (10, T0 + timedelta(minutes=10), 35.5)])

    card = job_intelligence(job)

    assert card["cost_usd"] == "1.05" and card["state"] == OK
    assert card["baseline_pass1"] == 30.0 and card["latest_pass1"] == 35.5 and card["gain_points"] == 5.5
    assert card["ipd_points_per_usd"] == round(5.5 / 1.05, 6)
    assert card["usd_per_point"] == "0.190909", "exact to the micro-dollar"
    assert (card["cost_display"], card["ipd_display"], card["usd_per_point_display"]) == ("$1.05", "5.24", "$0.19")
    assert card["ipd_title"] == "exact: 5.238095 pts/$" and card["cost_title"] == ""
    assert card["rollout_tokens"] == 2000  # two steps after the baseline, 1000 tokens each
    assert card["usd_per_million_tokens"] == "525.00"
    assert card["tokens_per_joule"] == 2000 / 360000


def test_the_curve_pairs_each_eval_with_the_dollars_spent_before_it(fleet):
    job = run_job(fleet, [(0, T0, 30.0), (5, T0 + timedelta(minutes=5), 33.0)])

    assert score_cost_curve(job) == [
        {"step": 0, "at": T0.isoformat(), "pass1": 30.0, "cost_usd": 0.0},
        {"step": 5, "at": (T0 + timedelta(minutes=5)).isoformat(), "pass1": 33.0, "cost_usd": 0.525},
    ]


def test_an_eval_inside_a_minute_is_charged_the_share_of_it_held_before_the_eval(fleet):
    # Two whole minutes ($0.105 each) and half of the third: a short job whose evals all fall in one
    # minute must not be charged that whole minute at each of them.
    job = run_job(fleet, [(0, T0 + timedelta(seconds=15), 30.0), (5, T0 + timedelta(minutes=2, seconds=30), 33.0)])

    assert [p["cost_usd"] for p in score_cost_curve(job)] == [0.02625, 0.2625]


def test_no_gain_and_no_cost_are_states_not_divisions_by_zero(fleet):
    job = run_job(fleet, [(0, T0, 30.0), (5, T0 + timedelta(minutes=5), 29.0)])

    card = job_intelligence(job)

    assert card["state"] == NO_GAIN and card["usd_per_point"] is None and card["ipd_points_per_usd"] < 0
    assert ipd(3.0, Decimal(0)) == (None, None, NO_COST)
    assert ipd(None, Decimal(5)) == (None, None, NO_EVAL)
    assert ipd(0.0, Decimal(5))[2] == NO_GAIN


def test_a_job_with_no_telemetry_yet_says_no_cost_yet(fleet):
    job = fleet.job("fresh", "red")
    fleet.evals(job, (0, T0, 30.0))

    card = job_intelligence(job)

    assert card["cost_usd"] == "0.00" and card["state"] == NO_COST
    assert card["usd_per_million_tokens"] is None and card["tokens_per_joule"] is None


def test_the_job_endpoint_returns_the_card_and_the_curve(fleet, client, viewer):
    job = run_job(fleet, [(0, T0, 30.0), (5, T0 + timedelta(minutes=5), 33.0)])
    client.force_login(viewer)

    body = client.get(f"/api/costs/jobs/{job.pk}").json()

    assert body["cost_usd"] == "1.05" and body["gain_points"] == 3.0 and len(body["curve"]) == 2
    assert client.get("/api/costs/jobs/999999").status_code == 404


def test_dollars_per_million_tokens_of_a_cheap_job_are_not_rounded_to_the_cent():
    from costs.intelligence import token_figures

    # $0.0039 for 51,200 tokens: $0.076171875 per million, which the cent would have made $0.08.
    figures = token_figures(Decimal("0.0039"), 51_200, Decimal(100))
    assert figures["usd_per_million_tokens"] == "0.076172"
    assert figures["tokens_per_joule"] == 512.0


def test_a_job_whose_gpus_sent_no_samples_is_not_measured_rather_than_free(fleet):
    """A node whose agent lists its GPUs but reads none of their telemetry: a 300 s H100 job there was shown
    "$0.00", and a sweep put such trials on its front at $0; its cost is no figure, said wherever it is shown."""
    from costs.intelligence import NOT_MEASURED, jobs_money

    set_prices(("*", "6.00", "0.50", "1.0", T0.date()))
    node = fleet.node("silent")
    quiet, heard = fleet.device(node), fleet.device(node)
    fleet.minutes(heard, T0, 5, power_w=600)
    silent_job, measured_job, short_job = fleet.job("s", "red"), fleet.job("m", "red"), fleet.job("short", "red")
    fleet.stint(silent_job, quiet, T0, T0 + timedelta(seconds=300))
    fleet.stint(measured_job, heard, T0, T0 + timedelta(seconds=300))
    fleet.stint(short_job, quiet, T0 + timedelta(minutes=6), T0 + timedelta(minutes=6, seconds=40))
    ids = [silent_job.pk, measured_job.pk, short_job.pk]
    assert jobs_money(ids)[silent_job.pk]["cost_usd"] == "0.00", "attribution never ran: nothing charged yet, no verdict"
    attribute(now=T0 + timedelta(minutes=11))
    money = jobs_money(ids)
    silent = money[silent_job.pk]
    assert (silent["cost_usd"], silent["cost_display"], silent["points_per_usd"]) == (None, NOT_MEASURED, None)
    assert silent["cost_title"] == "its GPUs sent no samples while it held them (1 GPU on silent, 300 s): no device " \
                                   "time or energy could be charged"
    assert money[measured_job.pk]["cost_usd"] == "0.525", "5 minutes at $0.10 and 36 kJ a minute at $0.50/kWh"
    assert money[short_job.pk]["cost_usd"] == "0.00", "40 s may fall in one minute alone: no verdict"

"""The cost figures the attribute task shares with the pages: today's fleet totals and each job's cost and IPD.

Hand-computed example (every device-minute costs $0.10: $6/h, energy free).
It is 12:10 UTC on 1 May 2025. Node n1 has two GPUs:
- g1 reports 11:50-12:10 (20 minutes, $2.00); job A (running) holds it from
  11:55: A $1.50, idle $0.50.
- g2 reports 23:50 on 30 April to 00:10 (20 minutes); job C (completed) held
  it all along: C $2.00 in all, $1.00 of it today.
Evals: A 30 → 36 points (gain 6); C 40 (yesterday) → 45 (today; gain 5).

Fleet today: jobs $2.50 ($1.50 of A + $1.00 of C) + idle $0.50 = $3.00. Both
jobs are on arithmetic: its IPD today is (6 + 5) points / $2.50 = 4.4 points
per dollar, $0.227273 a point; idle is shown apart, never in IPD.
A: $1.50, 6 / 1.5 = 4 points per dollar, $0.25 a point. C: $2.00, 2.5 points
per dollar, $0.40 a point. A queued job Q: $0.00, no eval yet. A stopped job B
with no cost and no change is left out.
"""

import json
from datetime import date, timedelta

from cost_builders import set_prices, utc

from costs import live
from costs.attribution import attribute
from costs.intelligence import job_intelligence
from costs.money import DISPLAY_KEYS
from tests.dashboard.builders import minutes_of_today
from tests.live_events import run_collecting

NOW = utc(2025, 5, 1, 12, 10)


def build(fleet):
    set_prices(("*", "6.00", "0", "1", date(2020, 1, 1)))
    n1 = fleet.node("n1", team="infra")
    g1, g2 = fleet.device(n1), fleet.device(n1)
    fleet.minutes(g1, utc(2025, 5, 1, 11, 50), 20, power_w=300)
    fleet.minutes(g2, utc(2025, 4, 30, 23, 50), 20, power_w=300)
    a = fleet.job("job A", "red")
    b = fleet.job("job B", "red", status="stopped")
    c = fleet.job("job C", "blue", status="completed")
    q = fleet.job("job Q", "blue", status="queued")
    fleet.stint(a, g1, utc(2025, 5, 1, 11, 55))
    fleet.stint(c, g2, utc(2025, 4, 30, 23, 50), utc(2025, 5, 1, 0, 10))
    fleet.evals(a, (0, utc(2025, 5, 1, 11, 56), 30.0), (10, utc(2025, 5, 1, 12, 5), 36.0))
    fleet.evals(c, (0, utc(2025, 4, 30, 23, 51), 40.0), (10, utc(2025, 5, 1, 0, 5), 45.0))
    return a, b, c, q


def test_a_laptops_day_that_cost_under_a_cent_shows_on_the_fleet_card_as_it_was_not_as_zero(fleet):
    set_prices(("*", "0.036", "0", "1", date(2020, 1, 1)))  # $0.0006 a device-minute
    g = fleet.device(fleet.node("laptop"))
    fleet.minutes(g, utc(2025, 5, 1, 12, 0), 5, power_w=20)
    job = fleet.job("tiny", "red")
    fleet.stint(job, g, utc(2025, 5, 1, 12, 0), utc(2025, 5, 1, 12, 3))
    attribute(now=NOW, since=utc(2025, 5, 1, 11, 0))

    fleet_card = live.fleet_json(live.fleet_today(NOW))

    assert (fleet_card["attributed_usd"], fleet_card["idle_usd"], fleet_card["fleet_usd"]) == \
        ("0.0018", "0.0012", "0.003")
    assert (fleet_card["attributed_display"], fleet_card["idle_display"], fleet_card["fleet_display"]) == \
        ("$0.0018", "$0.0012", "$0.003")


def test_the_costs_event_carries_todays_fleet_totals_and_each_jobs_cost_and_ipd(fleet):
    a, b, c, q = build(fleet)
    summary = attribute(now=NOW, since=utc(2025, 4, 30, 23, 0))
    assert summary["jobs"] == [a.pk, c.pk], "the jobs whose allocations this run wrote"

    data, _ = live.figures(NOW, summary["jobs"])

    fleet = data["fleet"]
    assert {k: fleet[k] for k in ("fleet_usd", "attributed_usd", "idle_usd", "fleet_display", "idle_display",
                                  "example_prices", "as_of")} == {
        "fleet_usd": "3.00", "attributed_usd": "2.50", "idle_usd": "0.50", "fleet_display": "$3.00",
        "idle_display": "$0.50", "example_prices": False, "as_of": "2025-05-01T12:10:00+00:00"}
    [env] = fleet["envs"]
    assert {k: env[k] for k in ("env", "jobs", "gain_points", "cost_usd", "ipd_points_per_usd", "usd_per_point",
                                "ipd_state", "ipd_display")} == {
        "env": "arithmetic", "jobs": 2, "gain_points": 11.0, "cost_usd": "2.50", "ipd_points_per_usd": 4.4,
        "usd_per_point": "0.227273", "ipd_state": "ok", "ipd_display": "4.40"}
    keys = ("id", "cost_usd", "points_per_usd", "usd_per_point", "state", "cost_display", "ipd_display",
            "usd_per_point_display")
    assert [{k: j[k] for k in keys} for j in data["jobs"]] == [
        {"id": a.pk, "cost_usd": "1.50", "points_per_usd": 4.0, "usd_per_point": "0.25", "state": "ok",
         "cost_display": "$1.50", "ipd_display": "4.00", "usd_per_point_display": "$0.25"},
        {"id": c.pk, "cost_usd": "2.00", "points_per_usd": 2.5, "usd_per_point": "0.40", "state": "ok",
         "cost_display": "$2.00", "ipd_display": "2.50", "usd_per_point_display": "$0.40"},
        {"id": q.pk, "cost_usd": "0.00", "points_per_usd": None, "usd_per_point": None, "state": "no eval yet",
         "cost_display": "$0.00", "ipd_display": "—", "usd_per_point_display": "—"},
    ]
    for job, sent in zip((a, c, q), data["jobs"]):
        card = job_intelligence(job)
        assert (sent["cost_usd"], sent["points_per_usd"], sent["usd_per_point"], sent["state"]) == \
            (card["cost_usd"], card["ipd_points_per_usd"], card["usd_per_point"], card["state"]), "as the job page"
        assert all(sent[k] == card[k] for k in DISPLAY_KEYS), "the same text as the job page"
    assert json.loads(json.dumps(data)) == data, "plain JSON, as the channel layer carries it"


def test_a_job_whose_time_was_cut_back_is_sent_though_it_is_no_longer_running(fleet):
    a, _, _, q = build(fleet)
    attribute(now=NOW, since=utc(2025, 4, 30, 23, 0))
    # The crash detector found A's worker dead: its stint ends at the last heartbeat, 12:00.
    a.stints.update(ended_at=utc(2025, 5, 1, 12, 0))
    a.__class__.objects.filter(pk=a.pk).update(status="failed")

    summary = attribute(now=NOW + timedelta(minutes=1))

    assert summary["jobs"] == [a.pk], "A lost the minutes from 12:00 on"
    data, _ = live.figures(NOW, summary["jobs"])
    assert [j["id"] for j in data["jobs"]] == [a.pk, q.pk], "A beside the queued job"
    # 11:55-12:00: 5 minutes, $0.50; 6 points / $0.50.
    sent = data["jobs"][0]
    assert {k: sent[k] for k in ("id", "cost_usd", "points_per_usd", "usd_per_point", "state")} == {
        "id": a.pk, "cost_usd": "0.50", "points_per_usd": 12.0, "usd_per_point": "0.083333", "state": "ok"}


def test_the_attribute_task_publishes_the_figures_and_leaves_the_fleet_totals_for_the_page(clean_telemetry, fleet):
    from decimal import Decimal

    from costs.tasks import attribute as attribute_task
    from dashboard.readings import fleet_ipd_today

    set_prices(("*", "6.00", "0", "1", date(2020, 1, 1)))
    g1 = fleet.device(fleet.node("n1", team="infra"))
    start, count, floor = minutes_of_today()
    fleet.minutes(g1, start, count, power_w=300)
    job = fleet.job("live", "red")
    fleet.stint(job, g1, start)
    fleet.evals(job, (0, start + timedelta(seconds=1), 30.0), (10, floor - timedelta(seconds=1), 36.0))

    summary, events = run_collecting(attribute_task, ["costs"])

    assert summary["jobs"] == [job.pk]
    [event] = events
    assert (event["topic"], event["kind"]) == ("costs", "costs")
    cost = Decimal("0.10") * count  # $0.10 a device-minute, every minute held by the job
    [sent_job] = event["data"]["jobs"]
    assert {k: sent_job[k] for k in ("id", "cost_usd", "points_per_usd", "state")} == {
        "id": job.pk, "cost_usd": str(cost), "points_per_usd": round(6 / float(cost), 6), "state": "ok"}
    sent = event["data"]["fleet"]
    assert (sent["fleet_usd"], sent["envs"][0]["ipd_points_per_usd"], sent["envs"][0]["ipd_state"]) == (
        str(cost), round(6 / float(cost), 6), "ok")
    # The fleet page reads what the task stored, rather than computing it again (a computation is "as of" now).
    shown = fleet_ipd_today()
    assert live.fleet_json(shown) == sent
    assert shown["fleet_usd"] == cost


def test_the_costs_event_carries_each_jobs_token_figures_and_cost_chart_as_its_page_shows_them(fleet):
    from costs.intelligence import score_cost_curve
    from dashboard import figures

    a, _, c, q = build(fleet)
    summary = attribute(now=NOW, since=utc(2025, 4, 30, 23, 0))

    data, _ = live.figures(NOW, summary["jobs"])

    sent = {j["id"]: j for j in data["jobs"]}
    # A: 1,000 rollout tokens (step 10) for $1.50.
    assert (sent[a.pk]["usd_per_million_tokens"], sent[a.pk]["usd_per_million_tokens_display"]) == \
        ("1500.00", "$1,500.00")
    assert sent[q.pk]["tokens_state"] == "no tokens yet" and sent[q.pk]["usd_per_million_tokens_display"] == "—"
    for job in (a, c, q):
        card = job_intelligence(job)
        assert all(sent[job.pk][k] == card[k] for k in ("usd_per_million_tokens", "tokens_per_joule",
                                                          "tokens_state")), "as the job page's card"
        job.refresh_from_db()
        drawn = figures.cost_ipd(score_cost_curve(job), job.baseline_pass1)["data"]
        curve = sent[job.pk]["cost_curve"]
        assert (curve["step"], curve["usd"], curve["ipd"]) == (drawn[0]["x"], drawn[0]["y"], drawn[1]["y"])
    assert sent[a.pk]["cost_curve"]["step"] == [0, 10] and sent[a.pk]["cost_curve"]["usd"] == [0.1, 1.0]

"""A fleet small enough to price by hand: two jobs sharing a node, a price change at midnight, an idle GPU.

Node n1 (team infra) has three H100s drawing a steady 300 W (g1), 200 W (g2)
and 50 W (g3), fully covered by telemetry from 23:00 on 10 March to 01:00 on
11 March 2025. The H100 price is $2/h, $0.10/kWh, PUE 1.5 until the 10th and
$3/h, $0.20/kWh, PUE 1.2 from the 11th.

- job A (red) on g1 23:00-00:30: $2 + 0.3 kWh x 0.15 + $1.50 + 0.15 kWh x 0.24
  = 2 + 0.045 + 1.5 + 0.036 = $3.581
- job B (blue) on g1 00:30-01:00 and g2 23:30-01:00:
  1.5 + 0.036 + (1 + 0.015) + (3 + 0.048) = $5.599
- idle (infra): g2 23:00-23:30 = 1 + 0.015; g3 all two hours = 2 + 0.0075 + 3 + 0.012
  = $6.0345
Fleet $15.2145 → $15.21. Rounded by largest remainder (see costs/report.py):
cells rounded down give 3.50 + 0.08 + 5.50 + 0.09 + 6.00 + 0.03 = 15.20; the
missing cent goes to the largest remainder, B's energy (0.099 → 0.10). So A
$3.58, B $5.60, idle $6.03.
"""

from datetime import date

from cost_builders import set_prices, utc

from costs.attribution import attribute


def build(fleet):
    set_prices(
        ("*H100*", "2.00", "0.10", "1.5", date(2020, 1, 1)),
        ("*H100*", "3.00", "0.20", "1.2", date(2025, 3, 11)),
        ("*", "1.00", "0.10", "1.0", date(2020, 1, 1)),
    )
    n1 = fleet.node("n1", team="infra")
    g1, g2, g3 = fleet.device(n1), fleet.device(n1), fleet.device(n1)
    start = utc(2025, 3, 10, 23, 0)
    for device, watts in ((g1, 300), (g2, 200), (g3, 50)):
        fleet.minutes(device, start, 120, power_w=watts)
    a = fleet.job("job A", "red")
    b = fleet.job("job B", "blue")
    fleet.stint(a, g1, start, utc(2025, 3, 11, 0, 30))
    fleet.stint(b, g1, utc(2025, 3, 11, 0, 30), utc(2025, 3, 11, 1, 0))
    fleet.stint(b, g2, utc(2025, 3, 10, 23, 30), utc(2025, 3, 11, 1, 0))
    fleet.evals(a, (0, utc(2025, 3, 10, 23, 1), 30.0), (10, utc(2025, 3, 11, 0, 20), 36.0))
    attribute(now=utc(2025, 3, 11, 2, 0), since=start)
    return a, b


def test_the_api_matches_the_hand_computed_costs_to_the_cent(fleet, client, viewer):
    a, b = build(fleet)
    client.force_login(viewer)

    body = client.get("/api/costs", {"from": "2025-03-10", "to": "2025-03-11", "group": "job"}).json()

    rows = {r["key"]: r for r in body["rows"]}
    assert rows[str(a.pk)]["total_usd"] == "3.58"
    assert rows[str(a.pk)]["device_cost_usd"] == "3.50" and rows[str(a.pk)]["energy_cost_usd"] == "0.08"
    assert rows[str(b.pk)]["total_usd"] == "5.60"
    assert rows["idle:infra"]["total_usd"] == "6.03" and rows["idle:infra"]["idle_usd"] == "6.03"
    assert body["totals"]["attributed_usd"] == "9.18"
    assert body["totals"]["idle_usd"] == "6.03"
    assert body["totals"]["fleet_usd"] == "15.21"
    assert rows[str(a.pk)]["device_hours"] == "1.5000" and rows[str(b.pk)]["device_hours"] == "2.0000"
    assert rows[str(a.pk)]["energy_kwh"] == "0.450000"


def test_the_job_with_evals_shows_its_gain_per_dollar_and_the_other_says_no_eval_yet(fleet, client, viewer):
    a, b = build(fleet)
    client.force_login(viewer)

    rows = {r["key"]: r for r in client.get("/api/costs", {"from": "2025-03-10", "to": "2025-03-11",
                                                          "group": "job"}).json()["rows"]}

    assert rows[str(a.pk)]["gain_points"] == 6.0
    # IPD divides by the unrounded $3.581 the CSV also carries, never by the cell's $3.58.
    assert rows[str(a.pk)]["attributed_exact_usd"] == "3.581" and rows[str(a.pk)]["total_usd"] == "3.58"
    assert rows[str(a.pk)]["ipd_points_per_usd"] == round(6 / 3.581, 6)
    assert rows[str(a.pk)]["usd_per_point"] == "0.596833"
    assert (rows[str(a.pk)]["cost_display"], rows[str(a.pk)]["ipd_display"]) == ("$3.58", "1.68")
    assert rows[str(b.pk)]["ipd_state"] == "no eval yet" and rows[str(b.pk)]["ipd_points_per_usd"] is None
    assert rows["idle:infra"]["ipd_state"] == "n/a"


def test_grouped_by_team_and_by_day_the_same_fleet_total_holds(fleet, client, viewer):
    build(fleet)
    client.force_login(viewer)

    for group in ("team", "node", "day"):
        body = client.get("/api/costs", {"from": "2025-03-10", "to": "2025-03-11", "group": group}).json()
        assert body["totals"]["fleet_usd"] == "15.21", group
    teams = {r["key"]: r for r in client.get("/api/costs", {"from": "2025-03-10", "to": "2025-03-11"}).json()["rows"]}
    assert set(teams) == {"red", "blue", "infra"}
    assert teams["infra"]["idle_usd"] == teams["infra"]["total_usd"]


def test_ipd_is_given_per_team_and_environment_and_never_summed_across_environments(fleet, client, viewer):
    a, b = build(fleet)
    b.__class__.objects.filter(pk=b.pk).update(env="toolcalc")
    fleet.evals(b, (0, utc(2025, 3, 10, 23, 35), 20.0), (10, utc(2025, 3, 11, 0, 50), 25.0))
    client.force_login(viewer)

    body = client.get("/api/costs", {"from": "2025-03-10", "to": "2025-03-11", "group": "team"}).json()

    # 6 arithmetic points and 5 toolcalc points are not 11 of anything: no team or fleet gain, no fleet IPD.
    assert {(r["key"], r["gain_points"], r["ipd_points_per_usd"], r["ipd_state"]) for r in body["rows"]} == {
        ("red", None, None, "by environment"), ("blue", None, None, "by environment"),
        ("infra", None, None, "by environment")}
    assert body["totals"]["ipd_points_per_usd"] is None and body["totals"]["gain_points"] is None
    # Per (team, environment): the jobs' gains over their unrounded costs; infra's idle $6.0345 in none.
    pick = ("team", "env", "jobs", "gain_points", "cost_usd", "ipd_points_per_usd", "ipd_display")
    assert [{k: g[k] for k in pick} for g in body["ipd_groups"]["by_team_env"]] == [
        {"team": "blue", "env": "toolcalc", "jobs": 1, "gain_points": 5.0, "cost_usd": "5.599",
         "ipd_points_per_usd": round(5 / 5.599, 6), "ipd_display": "0.893"},
        {"team": "red", "env": "arithmetic", "jobs": 1, "gain_points": 6.0, "cost_usd": "3.581",
         "ipd_points_per_usd": round(6 / 3.581, 6), "ipd_display": "1.68"},
    ]
    assert [(g["env"], g["cost_usd"]) for g in body["ipd_groups"]["by_env"]] == [
        ("arithmetic", "3.581"), ("toolcalc", "5.599")]

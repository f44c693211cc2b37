"""GET /api/costs: permissions, bad parameters, and agreement with the CSV and `manage.py cost_report`."""

import csv
import io
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from test_hand_computed_example import build

PERIOD = {"from": "2025-03-10", "to": "2025-03-11"}


def test_anonymous_callers_get_401(client, db):
    resp = client.get("/api/costs")
    assert resp.status_code == 401 and resp.json() == {"error": "authentication required"}


def test_a_user_without_a_role_gets_403_and_a_viewer_gets_200(client, outsider, viewer):
    client.force_login(outsider)
    assert client.get("/api/costs").status_code == 403
    client.force_login(viewer)
    assert client.get("/api/costs").status_code == 200


def test_a_viewer_token_reads_costs(client, viewer, api_token):
    resp = client.get("/api/costs", HTTP_AUTHORIZATION=f"Bearer {api_token(viewer)}")
    assert resp.status_code == 200 and resp.json()["totals"]["fleet_usd"] == "0.00"


@pytest.mark.parametrize("params,param,message", [
    ({"group": "color"}, "group", "group must be one of team, job, node, day, got 'color'"),
    ({"from": "2025-03-12", "to": "2025-03-10"}, "from", "from must be before to"),
    ({"from": "yesterday"}, "from", "from must be a date YYYY-MM-DD or an ISO 8601 date-time"),
    ({"to": "2025-02-30"}, "to", "got '2025-02-30'"),
    ({"format": "xlsx"}, "format", "format must be one of json, csv, got 'xlsx'"),
    ({"from": "2020-01-01", "to": "2025-01-01"}, "to", "the period may span at most 366 days"),
    # Dates at the calendar's edges overflowed (500) stepping past them.
    ({"to": "9999-12-31"}, "to", "to must be a time from 1970-01-01 to 2100-01-01 (UTC), got 9999-12-31"),
    ({"from": "9999-12-30", "to": "9999-12-31"}, "to", "to must be a time from 1970-01-01 to 2100-01-01"),
    ({"to": "0001-01-01"}, "to", "to must be a time from 1970-01-01 to 2100-01-01 (UTC), got 0001-01-01"),
    ({"from": "0001-01-01T00:00+05:00"}, "from", "from must be a time from 1970-01-01 to 2100-01-01"),
])
def test_bad_parameters_get_400_naming_the_parameter(client, viewer, params, param, message):
    client.force_login(viewer)
    resp = client.get("/api/costs", params)
    assert resp.status_code == 400
    assert resp.json()["param"] == param and message in resp.json()["error"]


@pytest.mark.parametrize("group", ["team", "job", "node", "day"])
def test_the_api_the_csv_and_the_command_agree(fleet, client, viewer, group):
    build(fleet)
    client.force_login(viewer)
    body = client.get("/api/costs", {**PERIOD, "group": group}).json()
    resp = client.get("/api/costs", {**PERIOD, "group": group, "format": "csv"})
    out = StringIO()
    call_command("cost_report", "--from", PERIOD["from"], "--to", PERIOD["to"], "--group", group,
                 "--format", "csv", stdout=out)
    text = StringIO()
    call_command("cost_report", "--from", PERIOD["from"], "--to", PERIOD["to"], "--group", group, stdout=text)

    assert resp["Content-Type"].startswith("text/csv")
    api_csv = list(csv.DictReader(io.StringIO(resp.content.decode())))
    assert resp.content.decode() == out.getvalue()
    *rows, totals = api_csv
    assert [r["key"] for r in rows] == [r["key"] for r in body["rows"]]
    for r, j in zip(rows, body["rows"]):
        for col in ("total_usd", "attributed_usd", "idle_usd", "device_hours", "energy_kwh", "simulated"):
            assert r[col] == (str(j[col]).lower() if isinstance(j[col], bool) else j[col]), col
    assert totals["key"] == "TOTAL" and totals["total_usd"] == body["totals"]["fleet_usd"] == "15.21"
    assert "attributed $9.18, idle $6.03, fleet $15.21 (each its exact total rounded to the cent)" in text.getvalue()
    for r in body["rows"]:
        assert r["total_usd"] in text.getvalue()


def test_flags_of_simulated_devices_and_example_prices_reach_the_csv(fleet, client, viewer):
    from datetime import timedelta

    from cost_builders import utc

    from costs.attribution import attribute

    sim = fleet.device(fleet.node("sim-node"), model="Simulated H100", source="sim", simulated=True)
    fleet.minutes(sim, utc(2025, 3, 10, 12, 0), 5, power_w=300)  # priced with the shipped example prices
    attribute(now=utc(2025, 3, 10, 12, 0) + timedelta(minutes=10))
    client.force_login(viewer)

    body = client.get("/api/costs", {**PERIOD, "group": "node"}).json()
    rows = list(csv.DictReader(io.StringIO(client.get("/api/costs", {**PERIOD, "group": "node",
                                                                      "format": "csv"}).content.decode())))

    assert body["rows"][0]["simulated"] is True and body["rows"][0]["example_prices"] is True
    assert rows[0]["simulated"] == "true" and rows[-1]["simulated"] == "true"
    assert rows[0]["example_prices"] == "true" and "examples" in body["note"]


def test_the_command_refuses_an_unknown_group_naming_the_flag(db):
    with pytest.raises(CommandError, match="--group: group must be one of team, job, node, day, got 'color'"):
        call_command("cost_report", "--group", "color")


def test_the_command_prints_json_equal_to_the_api(fleet, client, viewer):
    build(fleet)
    client.force_login(viewer)
    out = StringIO()
    call_command("cost_report", "--from", PERIOD["from"], "--to", PERIOD["to"], "--group", "job", "--format", "json",
                 stdout=out)
    api = client.get("/api/costs", {**PERIOD, "group": "job"}).json()

    assert json.loads(out.getvalue())["rows"] == api["rows"]
    assert json.loads(out.getvalue())["totals"] == api["totals"]


def test_it_sends_a_name_that_starts_a_formula_as_text_and_leaves_negative_numbers_as_numbers(fleet, client, viewer):
    from cost_builders import utc

    from costs.attribution import attribute

    a, b = build(fleet)
    a.name, a.team = "=1+2", "@ops"
    a.save(update_fields=["name", "team"])
    b.name = "-2+3"
    b.save(update_fields=["name"])
    fleet.evals(b, (0, utc(2025, 3, 11, 0, 31), 40.0), (10, utc(2025, 3, 11, 0, 50), 34.0))  # it got worse
    attribute(now=utc(2025, 3, 11, 2, 0), since=utc(2025, 3, 10, 23, 0))
    client.force_login(viewer)

    rows = {r["key"]: r for r in csv.DictReader(io.StringIO(client.get(
        "/api/costs", {**PERIOD, "group": "job", "format": "csv"}).content.decode()))}

    assert rows[str(a.pk)]["label"] == "'=1+2" and rows[str(a.pk)]["team"] == "'@ops"
    assert rows[str(b.pk)]["label"] == "'-2+3"
    assert rows[str(b.pk)]["gain_points"] == "-6.0"  # a negative number goes out as the number it is
    assert float(rows[str(b.pk)]["ipd_points_per_usd"]) < 0
    assert rows[str(a.pk)]["total_usd"] == "3.58"
    out = StringIO()
    call_command("cost_report", "--from", PERIOD["from"], "--to", PERIOD["to"], "--group", "job", stdout=out)
    assert "=1+2" in out.getvalue() and "'=1+2" not in out.getvalue()  # the terminal table shows the name as it is

"""The Hardware page on test_tokens' scene (H100 and Rubin runs on "arithmetic", one H100 run on "tool-use"):
the figures of each row as displayed, the filters, bad input named, and the CSV to the micro-dollar."""

import csv
import io
from html.parser import HTMLParser

import pytest

from collector.models import Device
from costs import tokens
from costs.models import PriceEntry
from tests.costs.test_tokens import HOPPER, RUBIN, scene  # noqa: F401 - scene is a fixture
from tests.dashboard import builders as b
from trainer.models import Job, Step

pytestmark = pytest.mark.django_db

# The columns after the model, as the table orders them.
COLUMNS = ("runs", "device_h", "tokens_per_s", "tokens_per_j", "generation", "all_in", "mtok_per_point",
           "per_point", "ipd", "prices")


class _Tables(HTMLParser):
    """{env: {model: {"rank": text, "model": text, column: text}}} of the page's tables, each cell's text with
    its whitespace collapsed."""

    def __init__(self):
        super().__init__()
        self.tables, self.env, self.row, self.cell = {}, None, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section" and "data-env" in attrs:
            self.env = self.tables.setdefault(attrs["data-env"], {})
        elif tag == "tr" and "data-model" in attrs:
            self.row = self.env.setdefault(attrs["data-model"], [])
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr":
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def tables(html):
    parser = _Tables()
    parser.feed(html)
    return {env: {model: dict(zip(("rank", "model") + COLUMNS, cells)) for model, cells in rows.items()}
            for env, rows in parser.tables.items()}


def test_each_environment_has_a_table_of_its_models_with_their_figures_and_the_runs_they_are_from(viewer_client, scene):  # noqa: F811
    resp = viewer_client.get("/hardware")
    assert resp.status_code == 200
    html = resp.content.decode()
    shown = tables(html)
    assert list(shown) == ["arithmetic", "tool-use"]
    assert list(shown["arithmetic"]) == [RUBIN, HOPPER], "cheapest point first"
    r, h, t = shown["arithmetic"][RUBIN], shown["arithmetic"][HOPPER], shown["tool-use"][HOPPER]
    assert (r["rank"], h["rank"]) == ("1", "2")
    assert t["rank"] == "— fewer than two runs: not ranked", "figures shown, not ranked"
    # Rubin: 2 runs of 4 device-minutes, 1M rollout tokens and $0.49 each ($0.245 of it generating), 10 points.
    assert (r["runs"], r["device_h"]) == ("2", "0.13")
    assert r["tokens_per_s"] == "4,167 2 runs"  # 2,000,000 tokens / 480 device-seconds
    assert r["tokens_per_j"] == "4.17 2 runs"  # 2,000,000 tokens / 480,000 J
    assert r["generation"] == "$0.25 2 runs" and 'title="exact: $0.245"' in html
    assert 'title="min–max over the 2 runs: $0.25–$0.25"' in html
    assert r["all_in"] == "$0.49 2 runs"
    assert r["mtok_per_point"] == "0.1 2 runs"
    assert r["per_point"] == "$0.05 2 runs" and 'title="exact: $0.049"' in html
    assert r["ipd"] == "20.4 2 runs"  # 20 points / $0.98
    assert r["prices"].startswith("*Rubin*: $7.20/h,") and "(from 2020-01-01)" in r["prices"]
    # H100: 10 minutes a run, $0.61 ($0.305 generating).
    assert (h["device_h"], h["tokens_per_s"].split()[0], h["generation"].split()[0]) == ("0.33", "1,667", "$0.31")
    assert (h["all_in"].split()[0], h["per_point"].split()[0], h["ipd"].split()[0]) == ("$0.61", "$0.06", "16.4")
    assert (t["runs"], t["per_point"]) == ("1", "$0.06 1 run")
    assert '<a href="/hardware" aria-current="page">Hardware</a>' in html
    assert "compared only within" in html and "Cost per token" in html
    assert "◇" not in html and "$ example prices" not in html


def test_a_figure_whose_runs_differ_shows_their_spread_under_it(viewer_client, scene):  # noqa: F811
    Step.objects.filter(job=scene["r2"], step__gt=0).update(gen_tokens=200_000)  # twice r1's tokens, same dollars
    r = tables(viewer_client.get("/hardware").content.decode())["arithmetic"][RUBIN]
    assert r["tokens_per_s"] == "6,250 2 runs 4,167–8,333"  # 3M tokens / 480 device-seconds; 1M or 2M / 240
    assert r["generation"] == "$0.16 2 runs $0.12–$0.25"  # $0.49 of generation / 3M tokens; $0.245 / 2M or 1M
    assert r["all_in"] == "$0.33 2 runs $0.25–$0.49"
    assert r["per_point"] == "$0.05 2 runs", "the same dollars and points a run"


def test_simulated_devices_and_example_prices_are_labelled_on_their_rows(viewer_client, scene):  # noqa: F811
    Device.objects.filter(model=RUBIN).update(simulated=True)
    PriceEntry.objects.filter(pattern="*Rubin*").update(is_example=True)
    shown = tables(viewer_client.get("/hardware").content.decode())
    assert "◇ simulated" in shown["arithmetic"][RUBIN]["model"]
    assert "$ example prices" in shown["arithmetic"][RUBIN]["model"]
    assert shown["arithmetic"][HOPPER]["model"] == HOPPER


def test_the_team_and_the_period_narrow_the_runs(viewer_client, scene):  # noqa: F811
    Job.objects.filter(pk=scene["t1"].pk).update(team="agents")
    b.job(name="not-yet", team="vision")  # a team with a job, none charged
    agents = viewer_client.get("/hardware?team=agents")
    assert list(tables(agents.content.decode())) == ["tool-use"]
    assert "team=agents" in agents.context["csv_href"]
    for query in ("team=vision", "from=2020-01-01&to=2020-01-31"):
        resp = viewer_client.get(f"/hardware?{query}")
        html = resp.content.decode()
        assert resp.status_code == 200 and "No runs charged in this period." in html and not tables(html)
    week = viewer_client.get("/hardware?period=7d").content.decode()
    assert '<a class="chip" href="?period=7d" aria-current="true">last 7 days</a>' in week
    assert list(tables(week)) == ["arithmetic", "tool-use"]


@pytest.mark.parametrize("query, message", [
    ("team=nobody", "team must be one of the teams with jobs (research), or empty for all teams; got &#x27;nobody&#x27;"),
    ("period=2w", "period must be one of 7d, 30d, 90d, 365d (or from/to dates), got &#x27;2w&#x27;"),
    ("from=yesterday", "from must be a date YYYY-MM-DD or an ISO 8601 date-time"),
    ("from=2025-02-01&to=2025-01-01", "from must be before to"),
    ("period=7d&from=2025-01-01", "give period or from/to, not both; got period=7d and from=2025-01-01"),
    ("format=xlsx", "format must be csv, or absent for the page; got &#x27;xlsx&#x27;"),
])
def test_a_bad_filter_is_answered_with_what_was_wrong_and_what_is_accepted(viewer_client, scene, query, message):  # noqa: F811
    resp = viewer_client.get(f"/hardware?{query}")
    assert resp.status_code == 400 and message in resp.content.decode()


def test_the_csv_has_a_row_per_environment_and_model_with_the_exact_money(viewer_client, scene):  # noqa: F811
    resp = viewer_client.get("/hardware?format=csv")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    assert resp["Content-Disposition"] == 'attachment; filename="hardware.csv"'
    lines = list(csv.reader(io.StringIO(resp.content.decode())))
    assert tuple(lines[0]) == tokens.HARDWARE_CSV
    rows = {(r["env"], r["model"]): r for r in csv.DictReader(io.StringIO(resp.content.decode()))}
    assert list(rows) == [("arithmetic", RUBIN), ("arithmetic", HOPPER), ("tool-use", HOPPER)]
    r, t = rows[("arithmetic", RUBIN)], rows[("tool-use", HOPPER)]
    assert (r["rank"], r["runs"], r["scored_runs"], r["generation_runs"]) == ("1", "2", "2", "2")
    assert (r["generation_usd_per_million_tokens"], r["usd_per_million_tokens"], r["usd_per_point"], r["cost_usd"]) == (
        "0.245", "0.49", "0.049", "0.98")
    assert float(r["tokens_per_device_s"]) == pytest.approx(2_000_000 / 480)
    assert float(r["points_per_usd"]) == pytest.approx(20 / 0.98)
    in_force = {(x["env"], x["model"]): x["prices"] for x in tokens.hardware()}
    assert r["prices"] == "; ".join(in_force[("arithmetic", RUBIN)]) and r["prices"].startswith("*Rubin*: $7.20/h,")
    assert (t["rank"], t["usd_per_point"]) == ("", "0.061")
    narrowed = viewer_client.get("/hardware?team=research&format=csv").content.decode().splitlines()
    assert len(narrowed) == 4, "a header and the same three rows: all of them are research's"


def test_a_visitor_who_is_not_logged_in_is_sent_to_log_in(client):
    resp = client.get("/hardware")
    assert resp.status_code == 302 and "/accounts/login/" in resp["Location"]


@pytest.mark.parametrize("param", ["period", "from", "to", "team", "format"])
def test_no_value_of_a_filter_breaks_the_page(viewer_client, param):
    for value in ("", " ", "0001-01-01", "9999-12-31T23:59:59", "2025-02-30", "1" + "0" * 5000, "=1+2", "é" * 300):
        resp = viewer_client.get("/hardware", {param: value, "format": "csv"} if param != "format" else {param: value})
        assert resp.status_code in (200, 400), (param, value[:20], resp.status_code)


def test_a_run_that_logs_no_rollout_tokens_shows_no_figure_of_them_not_zero(viewer_client, scene):  # noqa: F811
    Step.objects.filter(job=scene["t1"]).update(gen_tokens=0)  # TRL logs none

    t = tables(viewer_client.get("/hardware").content.decode())["tool-use"][HOPPER]

    assert t["tokens_per_s"] == "— 0 runs" and t["tokens_per_j"] == "— 0 runs"
    assert t["all_in"].startswith("—") and t["mtok_per_point"].startswith("—")
    assert t["per_point"] == "$0.06 1 run", "its dollars per point do not need its tokens"

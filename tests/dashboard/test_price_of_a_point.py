"""The job page's "Price of a point" card, its what-if form, and the same figures in the JSON API (the scene and
its hand-computed figures: tests/costs/test_tokens.py)."""

from decimal import Decimal

import pytest

from tests.costs.test_tokens import RUBIN, scene  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def test_the_job_page_shows_the_product_and_the_phases(viewer_client, scene):  # noqa: F811
    html = viewer_client.get(f"/jobs/{scene['h1'].pk}").content.decode()
    # $0.61 per 1M rollout tokens x 0.1 M tokens per point = $0.061 per point
    assert 'id="pp-per-mtok" title="">$0.61<' in html and 'id="pp-mtok-per-point">0.1<' in html
    assert 'id="pp-per-point" title="exact: $0.061">$0.06<' in html, "to the cent, the exact amount on hover"
    assert 'data-phase="generation"><td>generation (rollouts)</td>' in html and "50.0 %" in html
    assert 'id="pp-gen" title="exact: $0.305">$0.31<' in html  # $0.305 to the cent, half up


def test_a_what_if_on_the_page_is_an_estimate_with_its_figures(viewer_client, scene):  # noqa: F811
    html = viewer_client.get(f"/jobs/{scene['h1'].pk}", {"model": RUBIN, "speedup": "4"}).content.decode()
    html = " ".join(html.split())
    assert "estimate</span> On NVIDIA Rubin" in html and 'id="what-if-cost">$0.31<' in html
    assert "600 device-seconds ÷ 4.000 (a speed-up of 4× typed by the user) = 150 s" in html
    bad = viewer_client.get(f"/jobs/{scene['h1'].pk}", {"model": RUBIN, "speedup": "fast"}).content.decode()
    assert 'id="what-if-error"' in bad and "speed-up must be a number above 0" in bad and "&#x27;fast&#x27;" in bad
    assert 'id="what-if-speedup" name="speedup" inputmode="decimal" value="fast"' in bad


def test_the_api_gives_the_decomposition_and_the_what_if(viewer_client, scene):  # noqa: F811
    job = viewer_client.get(f"/api/jobs/{scene['h1'].pk}").json()
    point = job["price_of_a_point"]
    assert Decimal(point["usd_per_million_tokens"]) * Decimal(str(point["million_tokens_per_point"])) \
        == Decimal(point["usd_per_point"])
    assert sum(Decimal(p["usd"]) for p in point["phases"]) == Decimal(point["cost_usd"])
    w = viewer_client.get(f"/api/costs/jobs/{scene['h1'].pk}/what-if", {"model": RUBIN, "speedup": "4"}).json()
    assert w["estimate"] is True and Decimal(w["projected_cost_usd"]) == Decimal("0.30625")
    bad = viewer_client.get(f"/api/costs/jobs/{scene['h1'].pk}/what-if", {"model": RUBIN, "speedup": "-1"})
    assert bad.status_code == 400 and bad.json()["param"] == "speedup"
    none = viewer_client.get(f"/api/costs/jobs/{scene['t1'].pk}/what-if", {"model": RUBIN})
    assert none.status_code == 400 and "type a speed-up instead" in none.json()["error"]


def test_the_costs_page_says_where_the_jobs_dollars_went_and_the_csv_has_it(viewer_client, scene):  # noqa: F811
    html = " ".join(viewer_client.get("/costs", {"group": "job"}).content.decode().split())
    # Four H100 / Rubin runs and the tool-use one: generation 0.305 x 3 + 0.245 x 2 = $1.405 of $2.81.
    assert 'data-phase="generation">generation <strong><span title="exact: $1.405">$1.41</span></strong> (50.0 %)' in html
    assert "Generation $ / 1M rollout tokens: NVIDIA H100 80GB HBM3 <strong" in html and ">$0.31</strong>" in html
    csv = viewer_client.get("/api/costs", {"group": "job", "format": "csv"}).content.decode().splitlines()
    header = csv[0].split(",")
    total = dict(zip(header, csv[-1].split(",")))
    assert Decimal(total["generation_exact_usd"]) == Decimal("1.405")
    assert sum(Decimal(total[f"{p}_exact_usd"]) for p in ("generation", "training", "evaluation", "steps_other",
                                                            "waiting", "no_split")) == Decimal(total["attributed_exact_usd"])


def test_compare_puts_the_jobs_prices_of_a_point_side_by_side(viewer_client, scene):  # noqa: F811
    h1, r1 = scene["h1"], scene["r1"]
    html = " ".join(viewer_client.get("/compare", {"jobs": f"{h1.pk},{r1.pk}"}).content.decode().split())
    rows = html.split('id="compare-points"')[1]
    assert f'data-job="{h1.pk}"' in rows and f'data-job="{r1.pk}"' in rows
    # H100: $0.61 x 0.1 = $0.061 (shown $0.06); Rubin: $0.49 x 0.1 = $0.049 (shown $0.05), generation half of each.
    assert '<td class="num" title="">$0.61</td> <td class="num">0.1</td> <td class="num" title="exact: $0.061">$0.06</td>' in rows
    assert '<td class="num" title="">$0.49</td> <td class="num">0.1</td> <td class="num" title="exact: $0.049">$0.05</td>' in rows
    assert rows.count("50.0 %") == 2


def test_the_fleet_page_says_what_the_jobs_forward_passes_cost_today(viewer_client, scene):  # noqa: F811
    from datetime import UTC, datetime, time

    from costs import report
    from costs.money import usd_text, usd_title

    now = datetime.now(UTC)
    today = report.build(report.Period(datetime.combine(now.date(), time(0), tzinfo=UTC), now), "day").totals
    html = " ".join(viewer_client.get("/").content.decode().split())
    generation = Decimal(today["generation_exact_usd"])
    assert generation > 0 or now.hour == 0, "the scene's minutes are today's (but in the day's first half hour)"
    assert f'id="card-generation-usd"><span title="{usd_title(generation)}">{usd_text(generation)}</span>' in html \
        or f'id="card-generation-usd">{usd_text(generation)}<' in html

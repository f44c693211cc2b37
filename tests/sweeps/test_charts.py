"""The sweep page's charts as drawn. The front: a staircase through the trials nothing beats, in order of dollars, its
corners where those trials are now. Optuna's views of the study (parallel coordinates, slices): the trials the search
learnt from at their values and objectives, checked by hand, on each space's scale, the rest counted and said; and in
Chromium, drawn on the real page."""

import json

import plotly.graph_objects as go
import pytest

from sweeps.charts import CIVIDIS, front, parallel, slices
from sweeps.figures import summary
from sweeps.models import Sweep
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import in_thread, log_in, shot, user_in_role
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.sweeps.bill import prices
from tests.sweeps.test_sweep_api import GOOD, recipes, run_charged  # noqa: F401 - the API tests' recipe and sweep


def _trial(number, usd, score):
    # Its newest score came at 90 % of its dollars; the rest was spent after (a last stretch, then the end).
    return {"number": number, "job_id": 10 + number, "params": {"lr": 1e-3}, "status": "completed",
            "stopped_by_sweep": False, "cost_usd": str(usd), "score": score, "on_front": True,
            "curve": [{"usd": usd / 2, "score": score / 2}, {"usd": usd * 0.9, "score": score}]}


def test_the_front_steps_up_where_a_dearer_trial_scores_more_whatever_order_the_trials_started_in():
    # Trial 0 (the defaults) cost more and scored more than trial 1: the score $0.0012 buys is trial 1's 1.2, and
    # only at $0.0014 does the front rise to 33.4. Drawn in trial order, it rose at $0.0012 (a score nobody bought).
    summary = {"trials": [_trial(0, 0.0014, 33.4), _trial(1, 0.0012, 1.2)], "front": [1, 0]}
    data = front(summary)["data"]
    drawn = next(t for t in data if t["name"].startswith("the front"))
    assert (drawn["x"], drawn["y"], drawn["line"]["shape"]) == ([0.0012, 0.0014], [1.2, 33.4], "hv")
    # Each trial's marker is at its newest score and all its dollars, on the front's corner; its curve runs on to it.
    markers = next(t for t in data if t["name"] == "completed")
    assert (markers["x"], markers["y"]) == ([0.0014, 0.0012], [33.4, 1.2])
    curve = next(t for t in data if t["name"] == "trial 0")
    assert (curve["x"][-2:], curve["y"][-2:]) == ([0.0014 * 0.9, 0.0014], [33.4, 33.4])
    # Each trial's line says whose it is: labelled where it ends, and on hover along it.
    assert curve["text"] == ["", "", "trial 0"] and "lines+text" == curve["mode"]
    assert curve["hovertemplate"].startswith("trial 0: ")


# -- Optuna's views of the study: parallel coordinates and slices ---------------------------------------------------

SPACE = [{"name": "lr", "low": 1e-5, "high": 1e-1, "log": True, "integer": False},
         {"name": "group", "choices": [4, 8, 16]},
         {"name": "kl", "low": 0.0, "high": 0.2, "log": False, "integer": False}]


def _row(number, lr, group, kl, usd, score, gain, status="completed", **more):
    return {"number": number, "job_id": 100 + number, "params": {"lr": lr, "group": group, "kl": kl},
            "status": status, "stopped_by_sweep": "", "interrupted": False, "settling": False,
            "cost_usd": None if usd is None else str(usd), "score": score, "gain_points": gain, "curve": [], **more}


def _study(objective="per_dollar", target=None, extra=()):
    # Three results, points per dollar 10 / 0.5 = 20, 2 / 0.25 = 8 (stopped by the sweep: a result) and 25 / 1 = 25;
    # then one trial for each reason a trial is no result.
    return {"objective": objective, "target_score": target, "space": SPACE, "trials": [
        _row(0, 1e-4, 8, 0.1, 0.5, 30.0, 10.0),
        _row(1, 1e-2, 4, 0.0, 0.25, 12.0, 2.0, status="stopped", stopped_by_sweep="stopped by the sweep: ..."),
        _row(2, 1e-3, 16, 0.2, 1, 40.0, 25.0),
        _row(3, 1e-3, 4, 0.1, 0.1, 5.0, 1.0, status="running"),
        _row(4, 1e-3, 4, 0.1, 0.1, 5.0, 1.0, status="failed"),
        _row(5, 1e-3, 4, 0.1, 0.1, 5.0, 1.0, status="stopped", interrupted=True),
        _row(6, 1e-3, 4, 0.1, None, 5.0, 1.0),
        _row(7, 1e-3, 4, 0.1, 0.1, 5.0, 1.0, settling=True),
        _row(8, 1e-3, 4, 0.1, 0, 5.0, 0.0),
        *extra]}


def valid(fig):
    go.Figure({"data": fig["data"], "layout": fig["layout"]})  # raises on any unknown or bad property
    return fig


def _lines(fig):
    return {t["name"]: t for t in fig["data"] if t["name"].startswith("trial ")}


LEFT = ("Left out: 1 still running or queued, 1 still being charged, 1 interrupted, 1 failed, 1 with dollars not "
        "measured, 1 with no gain or nothing charged.")


def test_parallel_coordinates_draw_a_line_for_each_result_through_its_values_and_points_per_dollar():
    fig = valid(parallel(_study()))
    lines = _lines(fig)
    assert sorted(lines) == ["trial 0", "trial 1", "trial 2"], "only the trials the search learnt from"
    assert fig["layout"]["xaxis"]["ticktext"] == ["lr", "group", "kl", "points per dollar (net gain ÷ dollars)"]
    # Heights on each axis: lr on a log axis over its space (1e-5 to 1e-1: a decade a quarter), group at its
    # choice (4, 8, 16 evenly), kl over 0 to 0.2, points per dollar over the results' 8 to 25.
    assert lines["trial 0"]["y"] == pytest.approx([0.25, 0.5, 0.5, 12 / 17])
    assert lines["trial 1"]["y"] == pytest.approx([0.75, 0.0, 0.0, 0.0])
    assert lines["trial 2"]["y"] == pytest.approx([0.5, 1.0, 1.0, 1.0])
    assert [c[1] for c in lines["trial 0"]["customdata"]] == ["0.0001", "8", "0.1", "20"]
    assert lines["trial 1"]["customdata"][3] == ["points per dollar (net gain ÷ dollars)", "8"]
    assert "trial 2 (job 102)" in lines["trial 2"]["hovertemplate"]
    # The best is drawn last (on top), and darkest.
    assert [t["name"] for t in fig["data"] if t["name"].startswith("trial")] == ["trial 1", "trial 0", "trial 2"]
    assert lines["trial 2"]["line"]["color"] == CIVIDIS[0] and lines["trial 1"]["line"]["color"] == CIVIDIS[-1]
    # The log axis' ticks are its decades, the categorical one's its values; all said on the chart.
    ticks = {(round(a["x"]), a["text"]) for a in fig["layout"]["annotations"]}
    assert {(0, "1e-05"), (0, "0.0001"), (0, "0.001"), (0, "0.01"), (0, "0.1")} <= ticks
    assert {(1, "4"), (1, "8"), (1, "16"), (2, "0"), (2, "0.2"), (3, "8"), (3, "25")} <= ticks
    assert fig["layout"]["title"]["subtitle"]["text"] == LEFT


def test_slices_draw_the_objective_against_each_parameter_on_its_scale_coloured_by_the_order_tried():
    fig = valid(slices(_study()))
    by_axis = {t["xaxis"]: t for t in fig["data"]}
    assert sorted(by_axis) == ["x", "x2", "x3"], "a slice for each searched parameter"
    lr, group, kl = by_axis["x"], by_axis["x2"], by_axis["x3"]
    assert (lr["x"], lr["y"], lr["customdata"]) == ([1e-4, 1e-2, 1e-3], [20.0, 8.0, 25.0], [0, 1, 2])
    assert lr["marker"]["color"] == [0, 1, 2] and lr["marker"]["showscale"] is True
    assert (group["x"], kl["x"]) == (["8", "4", "16"], [0.1, 0.0, 0.2])
    layout = fig["layout"]
    assert layout["xaxis"]["type"] == "log" and "type" not in layout["xaxis3"]
    # Over the space's range (a log axis' in powers of ten), ticked as the parallel coordinates' axes are.
    assert layout["xaxis"]["range"] == pytest.approx([-5.16, -0.84]) and layout["xaxis3"]["range"] == pytest.approx(
        [-0.008, 0.208])
    assert layout["xaxis"]["ticktext"] == ["1e-05", "0.0001", "0.001", "0.01", "0.1"]
    assert (layout["xaxis2"]["type"], layout["xaxis2"]["categoryarray"]) == ("category", ["4", "8", "16"])
    assert layout["yaxis"]["title"]["text"] == "points per dollar"
    assert layout["yaxis2"]["matches"] == "y" and layout["yaxis3"]["matches"] == "y"
    assert "trial %{customdata} (%{text}): lr %{x}" in lr["hovertemplate"] and lr["text"][0] == "job 100"
    assert layout["title"]["subtitle"]["text"] == LEFT


def test_the_front_has_an_axis_and_a_row_of_slices_for_each_of_its_two_objectives_and_colours_by_pareto_rank():
    # Trial 9 (20 points for $0.6) is beaten by trial 0 (30 for $0.5): the front's second rank. Trial 8, charged
    # nothing, is told to the front's search (5 points for $0), though it has no points per dollar.
    s = _study("front", extra=[_row(9, 1e-3, 8, 0.1, 0.6, 20.0, 5.0)])
    fig = valid(parallel(s))
    assert fig["layout"]["xaxis"]["ticktext"][-2:] == ["score (points)", "dollars"]
    lines = _lines(fig)
    assert sorted(lines) == ["trial 0", "trial 1", "trial 2", "trial 8", "trial 9"]
    assert lines["trial 9"]["y"][-2:] == pytest.approx([(20 - 5) / 35, 0.6])
    assert lines["trial 9"]["customdata"][-1] == ["dollars", "$0.6"]
    bar = fig["data"][-1]["marker"]
    assert (bar["cmin"], bar["cmax"], bar["colorbar"]["tickvals"]) == (0, 1, [0, 1])
    assert lines["trial 9"]["line"]["color"] == CIVIDIS[-1] and lines["trial 0"]["line"]["color"] == CIVIDIS[0]
    cut = valid(slices(s))
    assert len(cut["data"]) == 6, "two objectives, three parameters"
    assert [t["y"] for t in cut["data"] if t["xaxis"] in ("x", "x4")] == [[30.0, 12.0, 40.0, 5.0, 20.0],
                                                                          [0.5, 0.25, 1.0, 0.0, 0.6]]
    assert cut["layout"]["title"]["subtitle"]["text"] == LEFT.replace(", 1 with no gain or nothing charged", "")
    assert cut["layout"]["yaxis4"]["title"]["text"] == "dollars" and cut["layout"]["yaxis5"]["matches"] == "y4"


def test_the_cheapest_draws_the_trials_short_of_the_target_dotted_and_grey():
    fig = valid(parallel(_study("cheapest", target=35)))
    lines = _lines(fig)
    assert {n: t["line"]["dash"] for n, t in lines.items()} == {"trial 0": "dot", "trial 1": "dot", "trial 2": "solid",
                                                                 "trial 8": "dot"}
    assert [c[1] for c in lines["trial 2"]["customdata"]][-1] == "$1"
    cut = valid(slices(_study("cheapest", target=35)))
    short = [t for t in cut["data"] if t["name"] == "short of the target score"]
    assert [(t["x"], t["y"], t["marker"]["color"]) for t in short][0] == ([1e-4, 1e-2, 1e-3], [0.5, 0.25, 0.0],
                                                                         "#bbbbbb")


def test_with_fewer_than_two_results_they_say_what_they_need_and_what_was_left_out():
    s = _study()
    s["trials"] = [r for r in s["trials"] if r["number"] not in (1, 2)]
    for fig in (parallel(s), slices(s)):
        assert fig["data"] == [] and fig["empty"].endswith(LEFT)
    assert parallel(s)["empty"].startswith("No parallel coordinates yet: they need two trials that ended with a score "
                                           "and measured dollars; one has so far. Left out: ")
    assert slices(s)["empty"].startswith("No slices yet: ")
    s["trials"] = []
    assert parallel(s)["empty"].endswith("measured dollars; none has yet.")


def test_a_trial_outside_a_narrowed_space_is_left_out_as_the_search_leaves_it_out():
    s = {**_study(), "outside_space": [1]}
    assert sorted(_lines(parallel(s))) == ["trial 0", "trial 2"]
    assert "1 outside the narrowed space" in slices(s)["layout"]["title"]["subtitle"]["text"]


def test_an_integer_axis_ticks_whole_numbers_and_a_value_beyond_the_space_widens_it():
    s = _study()
    s["space"] = [{"name": "steps", "low": 4, "high": 16, "log": False, "integer": True}]
    for r, steps in zip(s["trials"], [4, 20, 10], strict=False):
        r["params"] = {"steps": steps}
    fig = valid(parallel(s))
    assert [a["text"] for a in fig["layout"]["annotations"] if a["x"] == 0] == ["4", "8", "12", "16", "20"]
    assert _lines(fig)["trial 1"]["y"][0] == 1.0 and _lines(fig)["trial 0"]["y"][0] == 0.0


def _two_results():
    """A per_dollar sweep over lr (log) and kl_coef whose trials 0 and 1 ran 6 charged steps each, scoring k and 2k
    at step k; trial 2 waits in the line. In a thread of its own in the browser test (in_thread says why)."""
    prices()
    sweep = Sweep.create(created_by=None, **{**GOOD, "budget_usd": "100", "parallel": 1})
    run_charged(sweep.trials.get(number=0).job, 6, score=float)
    sweep.advance()
    run_charged(sweep.trials.get(number=1).job, 6, score=lambda k: 2.0 * k)
    sweep.advance()
    return sweep


def _no_gain():
    """Two trials whose score stayed at 5 points over 6 charged steps: no trial gained."""
    prices()
    sweep = Sweep.create(created_by=None, **{**GOOD, "name": "flat", "budget_usd": "100", "parallel": 1})
    run_charged(sweep.trials.get(number=0).job, 6, score=lambda k: 5.0)
    sweep.advance()
    run_charged(sweep.trials.get(number=1).job, 6, score=lambda k: 5.0)
    sweep.advance()
    return sweep


def test_the_sweep_page_draws_the_study_from_its_trials_values_and_points_per_dollar(recipes, viewer, client):
    sweep = _two_results()
    client.force_login(viewer)
    resp = client.get(f"/sweeps/{sweep.pk}")
    html = resp.content.decode()
    assert 'data-fig="parallel"' in html and 'data-fig="slices"' in html
    figs = json.loads(resp.context["figures_json"])
    s = summary(sweep)
    assert s["space"] == sweep.space
    rows = {r["number"]: r for r in s["trials"]}
    lines = _lines(figs["parallel"])
    assert sorted(lines) == ["trial 0", "trial 1"]
    for n in (0, 1):
        values = [c[1] for c in lines[f"trial {n}"]["customdata"]]
        params = rows[n]["params"]
        assert values == [f"{params['lr']:.4g}", f"{params['kl_coef']:.4g}", f"{rows[n]['points_per_usd']:.4g}"]
        assert rows[n]["points_per_usd"] == pytest.approx(rows[n]["gain_points"] / float(rows[n]["cost_usd"]))
    assert figs["parallel"]["layout"]["title"]["subtitle"]["text"] == "Left out: 1 still running or queued."
    lr = next(t for t in figs["slices"]["data"] if t["xaxis"] == "x")
    assert (lr["x"], lr["customdata"]) == ([rows[0]["params"]["lr"], rows[1]["params"]["lr"]], [0, 1])
    assert figs["slices"]["layout"]["xaxis"]["type"] == "log"


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_draws_the_parallel_coordinates_and_the_slices(  # noqa: F811
        recipes, live_web, page, django_user_model, output_dir, request):
    sweep = in_thread(_two_results)
    user_in_role(django_user_model, "val", "viewer", subprocess=True)
    log_in(page, live_web.url, "val", "/sweeps")
    # A Daphne this test started loads Optuna at its first sweep page (the importance): seconds on a busy machine.
    page.goto(f"{live_web.url}/sweeps/{sweep.pk}", timeout=60_000)
    page.wait_for_selector('[data-fig="parallel"][data-drawn="true"]')
    page.wait_for_selector('[data-fig="slices"][data-drawn="true"]')
    parallel_chart = page.locator('[data-fig="parallel"]')
    # Two lines (trials 0 and 1), each through three axes: lr, kl_coef and points per dollar.
    paths = parallel_chart.locator(".scatterlayer path.js-line")
    assert paths.count() == 2
    assert [p.get_attribute("d").count("L") for p in paths.all()] == [2, 2]
    assert parallel_chart.locator(".xtick text").all_text_contents() == ["lr", "kl_coef",
                                                                         "points per dollar (net gain ÷ dollars)"]
    assert parallel_chart.locator(".gtitle-subtitle").text_content() == "Left out: 1 still running or queued."
    # Two slices (lr on a log axis, kl_coef), a point for each trial in each.
    slices_chart = page.locator('[data-fig="slices"]')
    assert slices_chart.locator(".scatterlayer .point").count() == 4
    assert sorted(slices_chart.locator(".g-xtitle, .g-x2title").all_text_contents()) == ["kl_coef", "lr"]
    shot(page, output_dir, request, "study")
    # A sweep none of whose trials gained says so where its best per dollar would be.
    in_thread(sweep.stop)  # its waiting trial gives the line's GPU to the next sweep's
    flat = in_thread(_no_gain)
    page.goto(f"{live_web.url}/sweeps/{flat.pk}")
    assert "(no trial gained)" in page.locator("#best-per-dollar").inner_text()

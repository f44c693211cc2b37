"""Every figure the pages build is a valid Plotly figure (graph_objects validates each property)."""

from datetime import datetime, timedelta, timezone

import plotly.graph_objects as go

from dashboard import figures
from tests.dashboard.builders import STEP_METRICS

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def valid(fig):
    go.Figure({k: v for k, v in fig.items() if k != "live"})  # raises on any unknown or bad property
    return fig


def test_job_figures_are_valid_and_their_live_specs_point_at_real_traces():
    steps = [(0, {"eval/pass1": 30.0})] + [(s, {**STEP_METRICS, "eval/pass1": 31.0} if s % 5 == 0 else STEP_METRICS)
                                           for s in range(1, 20)]
    curve = [{"step": 0, "at": NOW.isoformat(), "pass1": 30.0, "cost_usd": 0.0},
             {"step": 5, "at": NOW.isoformat(), "pass1": 31.0, "cost_usd": 0.5}]
    for name, fig in figures.job_figures(*figures.columns(steps), curve, 30.0).items():
        valid(fig)
        for t in (fig.get("live") or {}).get("traces", []):
            assert t["trace"] < len(fig["data"]), name


def test_nan_and_missing_metrics_become_gaps_not_errors():
    fig = figures.job_figures(*figures.columns([(1, {"train/reward_mean": float("nan")}), (2, {})]), [], None)["reward"]
    valid(fig)
    assert fig["data"][2]["y"] == [None, None]


def test_fleet_node_compare_and_cost_figures_are_valid():
    nodes = [{"name": "a", "devices": [{"index": 0, "util_pct": 50.0, "stale": False, "simulated": True,
                                        "power_estimated": False, "model": "H100"},
                                       {"index": 1, "util_pct": None, "stale": True, "simulated": False,
                                        "power_estimated": True, "model": "H100"}]}]
    heat = valid(figures.fleet_heatmap(nodes))
    assert heat["data"][0]["z"] == [[50.0, None]], "a stale device is a gap, not a zero"
    assert "simulated" in heat["data"][0]["text"][0][0]
    valid(figures.fleet_power([(NOW, 1.5)]))
    dev = {"uuid": "GPU-1", "index": 0, "simulated": False}
    for _, fig in figures.node_figures([(dev, [{"ts": NOW, "util_pct": 1.0}])], "raw"):
        valid(fig)

    class Job:
        pk, name = 1, "a"

    for x in figures.XMODES:
        valid(figures.compare([(Job(), [{"step": 0, "time": 0.0, "usd": 0.0, "pass1": 30.0}])], x))
    valid(figures.costs_by_day([("research", False, {NOW.date(): 1}),
                                ("idle (infra)", True, {NOW.date() + timedelta(days=1): 2})]))


def test_the_palette_is_okabe_ito():
    assert figures.PALETTE[:7] == ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442"]


def test_sparkline_scales_into_its_box():
    points = figures.sparkline([0.0, None, 1.0, 0.5])
    xs = [float(p.split(",")[0]) for p in points.split()]
    ys = [float(p.split(",")[1]) for p in points.split()]
    assert len(xs) == 3 and min(xs) >= 0 and max(xs) <= 120 and min(ys) >= 0 and max(ys) <= 28
    assert figures.sparkline([1.0]) == ""

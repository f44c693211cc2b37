"""Every figure the pages build is a valid Plotly figure (graph_objects validates each property)."""

from datetime import datetime, timedelta, timezone

import plotly.graph_objects as go

from dashboard import figures
from tests.dashboard.builders import STEP_METRICS

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def valid(fig):
    go.Figure({k: v for k, v in fig.items() if k not in ("live", "range_ms")})  # raises on any unknown or bad property
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
    nodes = [{"name": "a", "devices": [{"index": 0, "label": "GPU 0", "util_pct": 50.0, "stale": False,
                                        "simulated": True, "power_estimated": False, "model": "H100"},
                                       {"index": 1, "label": "GPU 1", "util_pct": None, "stale": True,
                                        "simulated": False, "power_estimated": True, "model": "H100"}]}]
    heat = valid(figures.fleet_heatmap(nodes))
    assert heat["data"][0]["z"] == [[50.0, None]], "a stale device is a gap, not a zero"
    assert "simulated" in heat["data"][0]["text"][0][0]
    power = valid(figures.fleet_power([(NOW, 1.5)], NOW - timedelta(hours=1), NOW))
    assert power["layout"]["xaxis"]["range"] == [NOW - timedelta(hours=1), NOW], "the chosen range, not the data's"
    assert power["range_ms"][1] - power["range_ms"][0] == 3_600_000
    dev = {"uuid": "GPU-1", "index": 0, "label": "GPU 0", "simulated": False}
    for _, fig in figures.node_figures([(dev, [{"ts": NOW, "util_pct": 1.0}])], "raw", NOW - timedelta(hours=1), NOW):
        assert fig["layout"]["xaxis"]["range"] == [NOW - timedelta(hours=1), NOW], "the chosen range"
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


def _device(index, label, model="H100", util=50.0):
    return {"index": index, "label": label, "util_pct": util, "stale": False, "simulated": False,
            "power_estimated": False, "model": model}


def test_the_heatmap_names_columns_by_what_the_devices_are():
    cpu_only = valid(figures.fleet_heatmap([{"name": "laptop", "devices": [_device(0, "CPU", "AMD EPYC")]}]))
    assert cpu_only["data"][0]["x"] == ["CPU"], "a CPU is not 'GPU 0'"
    assert cpu_only["data"][0]["text"][0][0].startswith("laptop / CPU AMD EPYC")
    mixed = valid(figures.fleet_heatmap([{"name": "laptop", "devices": [_device(0, "CPU")]},
                                         {"name": "gpu-a", "devices": [_device(0, "GPU 0"), _device(1, "GPU 1")]}]))
    assert mixed["data"][0]["x"] == ["CPU / GPU 0", "GPU 1"]


def test_a_metric_no_device_reports_says_so_instead_of_bare_axes():
    cpu = {"uuid": "CPU-1", "index": 0, "label": "CPU", "simulated": False}
    points = [{"ts": NOW + timedelta(seconds=s), "util_pct": 20.0, "sm_active_pct": None, "temp_c": None}
              for s in range(3)]
    figs = dict(figures.node_figures([(cpu, points)], "raw"))
    for key in ("sm", "temp"):
        fig = valid(figs[key])
        assert "not reported by this device" in fig["layout"]["annotations"][0]["text"], key
        assert fig["data"][0]["name"] == "CPU — not reported by this device"
        assert fig["layout"]["yaxis"]["showticklabels"] is False, "no bare −1…4 scale"
    assert "annotations" not in figs["util"]["layout"] and figs["util"]["data"][0]["name"] == "CPU"

    gpu = {"uuid": "GPU-1", "index": 0, "label": "GPU 0", "simulated": False}
    both = dict(figures.node_figures([(cpu, points), (gpu, [{**p, "temp_c": 60.0} for p in points])], "raw"))
    assert "annotations" not in both["temp"]["layout"], "one device reports it: draw it"
    assert [t["name"] for t in both["temp"]["data"]] == ["CPU — not reported by this device", "GPU 0"]


HOSTILE = "<b>qa</b><img src=x onerror=alert(2)>&co"


def test_user_strings_reach_plotly_escaped():
    escaped = "&lt;b&gt;qa&lt;/b&gt;&lt;img src=x onerror=alert(2)&gt;&amp;co"
    heat = figures.fleet_heatmap([{"name": HOSTILE, "devices": [_device(0, "GPU 0", model=HOSTILE)]}])
    assert heat["data"][0]["y"] == [HOSTILE], "rows keep the raw name: live samples find their row by it"
    assert heat["layout"]["yaxis"]["ticktext"] == [figures.short(HOSTILE, 32)]
    assert "<" not in heat["layout"]["yaxis"]["ticktext"][0]
    assert escaped in heat["data"][0]["text"][0][0] and "<b>" not in heat["data"][0]["text"][0][0]

    class Job:
        pk, name = 7, HOSTILE

    trace = figures.compare([(Job(), [{"step": 0, "time": 0.0, "usd": 0.0, "pass1": 30.0}])], "step")["data"][0]
    assert trace["name"] == f"#7 {escaped}"
    node = dict(figures.node_figures([({"uuid": "u", "index": 0, "label": HOSTILE, "simulated": False}, [])], "raw"))
    assert node["util"]["data"][0]["name"] == escaped
    costs = figures.costs_by_day([(HOSTILE, False, {NOW.date(): 1}), (f"idle ({HOSTILE})", True, {NOW.date(): 2})])
    assert [t["name"] for t in costs["data"]] == [figures.short(HOSTILE), figures.short(f"idle ({HOSTILE})")]
    assert not any("<" in t["name"] for t in costs["data"])


def test_a_long_name_is_shortened_in_legends_and_ticks():
    long = "x" * 200
    assert figures.short(long) == "x" * 59 + "…"
    assert figures.short("short <name>") == "short &lt;name&gt;"


def test_the_cost_chart_draws_dollars_from_zero_even_when_every_eval_cost_the_same():
    curve = [{"step": s, "at": "2026-12-01T00:00:00+00:00", "pass1": 30.0 + s, "cost_usd": 0.000829} for s in (0, 10)]
    fig = figures.cost_ipd(curve, 30.0)
    assert fig["data"][0]["y"] == [0.000829, 0.000829]
    assert fig["layout"]["yaxis"]["rangemode"] == "tozero", "not a -1..1 axis around a constant"

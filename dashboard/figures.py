"""Plotly figures, built in Python as plain figure dicts and drawn by the plotly.js of the installed package.

Plain dicts rather than `plotly.graph_objects`: constructing graph objects
validates every property on every call, which costs more than the page's
whole query budget at 2,000 steps; the tests pass every figure through
`go.Figure` instead, so a typo still fails loudly.

Colours: the Okabe–Ito palette (readable with the common colour-vision
deficiencies), and lines differ by dash as well as colour where several share a
chart. Heatmaps use Cividis, designed for the same readers.

A figure that grows live carries a `live` spec beside it: for each trace, the
step metric (or a sum/difference/ratio of two) that `dashboard.js` appends
with `Plotly.extendTraces` when a step event arrives.
"""

import html
import math

from collector.agent.schema import REASONS
from costs.intelligence import ipd_curve
from costs.money import usd_text

PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
BLUE, ORANGE, GREEN, VERMILLION, SKY, PURPLE, YELLOW, BLACK = PALETTE


def colour(i):
    return PALETTE[i % len(PALETTE)]


def esc(value):
    """A user's string (a name, team, label) as plotly.js shows it literally.

    plotly.js renders a subset of HTML in trace names, tick labels, hover text and
    annotations, and decodes &lt; &gt; &amp; back to the characters; every user
    string a figure carries goes through here.
    """
    return html.escape(str(value), quote=False)


def short(value, limit=60):
    """esc(value), cut to `limit` characters with "…": a legend entry or tick label as long as a
    200-character name would squeeze the plot to nothing (the hover and the page's tables have it whole)."""
    value = str(value)
    return esc(value if len(value) <= limit else value[:limit - 1] + "…")


def layout(title, xtitle=None, ytitle=None, **extra):
    out = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "margin": {"l": 56, "r": 64 if "yaxis2" in extra else 16, "t": 40, "b": 48},
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12, "color": "#1d1d1b"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#ffffff",
        # Below the chart, from the figure's bottom edge up: Plotly moves the plot up to make room, and
        # dashboard.js (fitLegend) makes the figure taller where its rows need more than LEGEND_ROOM.
        "legend": {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0, "x": 0},
        "hovermode": "x unified",
        "xaxis": {"title": {"text": xtitle or "", "standoff": 4}, "gridcolor": "#e6e6e6", "zeroline": False, "automargin": True},
        "yaxis": {"title": {"text": ytitle or ""}, "gridcolor": "#e6e6e6", "zeroline": False, "automargin": True},
        "colorway": PALETTE,
    }
    out.update(extra)
    return out


def empty_note(fig, text="No data in this range yet"):
    """Say so on a chart with no points, rather than drawing bare axes."""
    if not any(t.get("x") for t in fig["data"]):
        fig["layout"]["annotations"] = [{"text": text, "showarrow": False, "xref": "paper", "yref": "paper",
                                         "x": 0.5, "y": 0.5, "font": {"size": 14, "color": "#60605c"}}]
    return fig


def over_range(fig, start, end):
    """Give a time chart's x axis the chosen range [start, end] rather than its data's span (a fresh node's two
    minutes under "1h"), and `range_ms`, the same in epoch milliseconds, which the pages slide along, the
    range's length kept, as live points come (dashboard.js, fleet.js). Without start, the data's span."""
    if start is not None:
        fig["layout"]["xaxis"] = {**fig["layout"]["xaxis"], "type": "date", "range": [start, end]}
        fig["range_ms"] = [start.timestamp() * 1000, end.timestamp() * 1000]
    return fig


def line(name, x, y, i=0, **extra):
    trace = {"type": "scatter", "mode": "lines", "name": name, "x": list(x), "y": list(y),
             "line": {"color": colour(i), "width": 2, "dash": DASHES[i % len(DASHES)] if i else "solid"}}
    trace.update(extra)
    return trace


def _num(value):
    """A JSON-safe float, or None for missing, NaN and infinities."""
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


# -- fleet --------------------------------------------------------------------------


def fleet_heatmap(nodes):
    """Utilization of every device (columns: device index) of every node (rows); stale devices blank.

    A column is named by its devices' labels (Device.label: "GPU 0", or "CPU" for a host source).
    Rows stay the nodes' raw names (dashboard.js finds a live sample's row by them); the tick labels
    show them escaped and shortened.
    """
    width = max((d["index"] for n in nodes for d in n["devices"]), default=-1) + 1
    z, text, names = [], [], []
    column_labels = [dict() for _ in range(width)]  # ordered sets of the labels seen in each column
    for node in nodes:
        row = [None] * width
        labels = [""] * width
        for d in node["devices"]:
            util = None if d["stale"] else _num(d["util_pct"])
            row[d["index"]] = util
            column_labels[d["index"]][d["label"]] = True
            flags = " · simulated" if d["simulated"] else (" · power estimated" if d["power_estimated"] else "")
            shown = "stale" if d["stale"] else ("no reading" if util is None else f"{util:.0f}%")
            event = d.get("unhealthy")
            if event:  # the critical health event that makes it unhealthy (collector.models.DeviceEvent)
                flags += f" · ✗ unhealthy: {event.detail or event.kind} at {event.ts:%Y-%m-%d %H:%M:%S} UTC"
            labels[d["index"]] = esc(f"{node['name']} / {d['label']} {d['model']}: {shown}{flags}")
        z.append(row)
        text.append(labels)
        names.append(node["name"])
    columns = [" / ".join(seen) or f"device {i}" for i, seen in enumerate(column_labels)]
    height = max(220, min(1400, 70 + 22 * len(names)))
    return {
        "data": [{
            "type": "heatmap", "z": z, "x": columns, "y": names, "text": text,
            "hovertemplate": "%{text}<extra></extra>", "colorscale": "Cividis", "zmin": 0, "zmax": 100,
            "xgap": 2, "ygap": 2, "hoverongaps": False,
            "colorbar": {"title": {"text": "util %"}, "thickness": 12},
        }],
        "layout": layout("Utilization by node and device (now)", ytitle=None, height=height,
                         yaxis={"autorange": "reversed", "automargin": True, "type": "category",
                                "tickmode": "array", "tickvals": names, "ticktext": [short(n, 32) for n in names]},
                         xaxis={"side": "top", "automargin": True, "type": "category"}, hovermode="closest"),
    }


def fleet_power(points, start, end):
    """Fleet power (kW) over time from [(ts, kw)] over the chosen range [start, end] (over_range)."""
    return over_range(empty_note({
        "data": [line("fleet power", [p[0] for p in points], [_num(p[1]) for p in points], 0,
                      fill="tozeroy", fillcolor="rgba(0,114,178,0.12)")],
        "layout": layout("Fleet power", None, "kW", height=260, showlegend=False),
    }, "No rollups in this range yet"), start, end)


# -- node -------------------------------------------------------------------------------

# (title, unit, field at raw resolution, field in a rollup)
NODE_METRICS = [
    ("util", "Utilization", "%", "util_pct", "util_mean_pct"),
    ("sm", "SM activity", "%", "sm_active_pct", "sm_active_mean_pct"),
    ("power", "Power", "W", "power_w", "power_mean_w"),
    ("temp", "Temperature", "°C", "temp_c", "temp_max_c"),
    ("mem", "Memory used", "MiB", "mem_used_mib", "mem_used_max_mib"),
    # What newer GPUs report (collector/agent/sources/nvml.py): drawn only when a device of the node reports it.
    ("tensor", "Tensor-core activity", "%", "tensor_active_pct", "tensor_active_mean_pct"),
    ("occupancy", "SM occupancy", "%", "sm_occupancy_pct", "sm_occupancy_mean_pct"),
    ("module_power", "Module power (GPU + CPU + memory)", "W", "module_power_w", "module_power_mean_w"),
    ("nvlink_tx", "NVLink sent", "B/s", "nvlink_tx_bytes_s", "nvlink_tx_mean_bytes_s"),
    ("nvlink_rx", "NVLink received", "B/s", "nvlink_rx_bytes_s", "nvlink_rx_mean_bytes_s"),
]
NEWER = {"tensor", "occupancy", "module_power", "nvlink_tx", "nvlink_rx"}
# The power chart draws each device's enforced power limit, dotted, where the device reports one.
LIMIT = ("power_limit_w", "power_limit_min_w")
# The NVLink charts add the node's total where more than one device reports it.
SUMMED = {"nvlink_tx", "nvlink_rx"}


NOT_REPORTED = "not reported by this device"


def _node_total(series, field):
    """(x, y): the sum over the devices of `field` at each time (a node's devices share each tick's time, and
    rollups their buckets), where at least one device reports it."""
    totals = {}
    for _, points in series:
        for p in points:
            v = _num(p.get(field))
            if v is not None:
                totals[p["ts"]] = totals.get(p["ts"], 0.0) + v
    x = sorted(totals)
    return x, [totals[t] for t in x]


def node_figures(series, resolution, start=None, end=None):
    """One figure per metric, one trace per device: `series` is [(device dict, points)].

    A device whose points all lack the metric (a CPU has no SM activity; some GPUs no temperature)
    says "not reported" in its legend entry, and a chart none of whose devices report it says so
    instead of drawing bare axes. The power chart adds each device's power limit, the NVLink charts the
    node's total, and "throttle" is the timeline of why clocks were held down (clock_reasons_timeline).

    Returns [(key, figure)]; each figure's `live` maps traces to the sample fields
    a live sample event carries (raw resolution only). Given start and end, each spans that range (over_range).
    """
    out = []
    raw = resolution == "raw"
    suffix = {"raw": "raw samples", "1m": "1-minute rollups", "1h": "1-hour rollups"}[resolution]
    for key, title, unit, raw_field, rollup_field in NODE_METRICS:
        field = raw_field if raw else rollup_field
        data, silent, live = [], [], []
        for i, (device, points) in enumerate(series):
            ys = [_num(p.get(field)) for p in points]
            absent = bool(points) and all(y is None for y in ys)
            silent.append(absent)
            name = esc(device["label"]) + (" (sim)" if device["simulated"] else "") + (
                f" — {NOT_REPORTED}" if absent else "")
            data.append(line(name, [p["ts"] for p in points], ys, i))
            live.append({"trace": i, "device": device["uuid"], "y": {"key": raw_field}})
        if key in NEWER and all(silent):
            continue  # no device here reports it (older GPUs, CPUs): no empty chart about it
        if key == "power":
            limit_field = LIMIT[0] if raw else LIMIT[1]
            for i, (device, points) in enumerate(series):
                ys = [_num(p.get(limit_field)) for p in points]
                if any(y is not None for y in ys):
                    live.append({"trace": len(data), "device": device["uuid"], "y": {"key": LIMIT[0]}})
                    data.append(line(esc(device["label"]) + " power limit", [p["ts"] for p in points], ys, i,
                                     line={"color": colour(i), "width": 1, "dash": "dot", "shape": "hv"}))
        if key in SUMMED and sum(not s for s in silent) > 1:
            x, y = _node_total(series, field)
            live.append({"trace": len(data), "devices": [d["uuid"] for d, _ in series], "y": {"key": raw_field}})
            data.append(line("node total", x, y, 0, line={"color": BLACK, "width": 2.5}))
        fig = {"data": data, "layout": layout(f"{title} ({suffix})", None, unit, height=260)}
        if silent and all(silent):
            who = "this device" if len(silent) == 1 else "these devices"
            fig["layout"]["annotations"] = [{
                "text": f"{title}: not reported by {who}", "showarrow": False, "xref": "paper", "yref": "paper",
                "x": 0.5, "y": 0.5, "font": {"size": 14, "color": "#60605c"}}]
            for axis in ("xaxis", "yaxis"):
                fig["layout"][axis].update(showticklabels=False, showgrid=False)
        else:
            fig = empty_note(fig, f"No {suffix} in this range")
        fig["live"] = {"x": "ts", "traces": live}
        out.append((key, over_range(fig, start, end)))
    timeline = clock_reasons_timeline(series, resolution)
    if timeline:
        out.append(("throttle", over_range(timeline, start, end)))
    return out


REASON_COLOURS = {"power_cap": ORANGE, "thermal": VERMILLION, "sync_boost": SKY, "hw_slowdown": PURPLE}


def clock_reasons_timeline(series, resolution):
    """Why each device's clocks were held down, over time: a row per device and group of schema.REASONS (power
    cap, thermal, sync boost, HW slowdown), a mark where a raw sample had the reason, or where a rollup's
    samples did (its hover gives the share); an unmarked row was not held down for that reason. None when no
    device here reports clocks event reasons."""
    raw = resolution == "raw"
    reporting = [(d, pts) for d, pts in series
                 if any((p.get("clock_event_reasons") is not None) if raw else p.get("reasons_samples") for p in pts)]
    if not reporting:
        return None
    data, live, rows = [], [], []
    for d, points in reporting:
        for group, name, bits in REASONS:
            row = f"{esc(d['label'])} · {name}"
            rows.append(row)
            x, y, text = [], [], []
            for p in points:
                if raw:
                    reasons = p.get("clock_event_reasons")
                    held = reasons is not None and bool(reasons & bits)
                    share = 100.0 if held else 0.0
                else:
                    share = 100.0 * p[f"{group}_samples"] / p["reasons_samples"] if p.get("reasons_samples") else 0.0
                    held = share > 0
                x.append(p["ts"])  # every time, marked or not: the axis spans the range drawn
                y.append(row if held else None)
                text.append(f"{share:.0f}% of samples")
            live.append({"trace": len(data), "device": d["uuid"], "y": {"bits": bits, "row": row}})
            data.append({"type": "scatter", "mode": "markers", "name": name, "legendgroup": group,
                         "showlegend": d is reporting[0][0], "x": x, "y": y, "text": text,
                         "hovertemplate": "%{y}: %{text}<extra></extra>",
                         "marker": {"symbol": "square", "size": 9, "color": REASON_COLOURS[group]}})
    suffix = {"raw": "raw samples", "1m": "1-minute rollups", "1h": "1-hour rollups"}[resolution]
    fig = {"data": data, "layout": layout(
        f"Why clocks were held down ({suffix})", height=90 + 18 * len(rows), hovermode="closest",
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": rows, "range": [len(rows) - 0.5, -0.5],
               "automargin": True, "gridcolor": "#e6e6e6"})}
    fig = empty_note(fig, f"No {suffix} in this range")
    fig["live"] = {"x": "ts", "traces": live}
    return fig


# -- jobs ----------------------------------------------------------------------------------


def _key(metric):
    return {"key": metric}


# The step metrics the job page draws.
JOB_KEYS = (
    "train/reward_mean", "train/reward_std", "eval/pass1", "performance/gen_tokens_per_s", "performance/gen_tokens",
    "timing/step_s", "timing/generate_s", "timing/score_s", "timing/train_s", "timing/eval_s", "timing/checkpoint_s",
    "train/loss", "train/kl", "train/entropy", "train/clip_ratio",
)


def columns(steps, keys=JOB_KEYS):
    """(x, {key: values}) from [(step, metrics)], the shape trainer.models.Step.columns returns."""
    return [s for s, _ in steps], {k: [m.get(k) for _, m in steps] for k in keys}


def job_figures(x, cols, cost_curve, baseline_pass1):
    """The job page's figures from the steps `x` and metric columns `cols` ({key: [value per step]}).

    Returns {name: figure}; reward, throughput, timing and losses grow live. A figure with nothing to
    draw yet carries `empty` (what to say instead of bare axes; dashboard.js says the job's phase
    while it has one) and is drawn when its first point arrives.
    """
    def col(key):
        values = cols.get(key) or [None] * len(x)
        # jsonb holds no NaN; the check is for callers that built their columns by hand.
        return [v if v is None or (isinstance(v, (int, float)) and math.isfinite(v)) else _num(v) for v in values]

    mean, std = col("train/reward_mean"), col("train/reward_std")
    upper = [None if a is None or b is None else a + b for a, b in zip(mean, std)]
    lower = [None if a is None or b is None else a - b for a, b in zip(mean, std)]
    evals = [(s, v) for s, v in zip(x, col("eval/pass1")) if v is not None]

    reward = {
        "data": [
            line("mean − std", x, lower, 0, showlegend=False, hoverinfo="skip",
                 line={"width": 0, "color": BLUE}),
            line("±1 std", x, upper, 0, fill="tonexty", fillcolor="rgba(0,114,178,0.18)",
                 line={"width": 0, "color": BLUE}, hoverinfo="skip"),
            line("reward mean", x, mean, 0),
            {"type": "scatter", "mode": "markers+lines", "name": "eval pass@1 (points)", "yaxis": "y2",
             "x": [e[0] for e in evals], "y": [e[1] for e in evals],
             "marker": {"color": ORANGE, "symbol": "diamond", "size": 9}, "line": {"color": ORANGE, "dash": "dot"}},
        ],
        "layout": layout("Reward (mean ± std) and eval pass@1", "step", "reward", height=320,
                         yaxis2={"title": {"text": "pass@1 (points)"}, "overlaying": "y", "side": "right",
                                 "rangemode": "tozero", "showgrid": False}),
        "live": {"x": "step", "traces": [
            {"trace": 0, "y": {"diff": ["train/reward_mean", "train/reward_std"]}},
            {"trace": 1, "y": {"sum": ["train/reward_mean", "train/reward_std"]}},
            {"trace": 2, "y": _key("train/reward_mean")},
            {"trace": 3, "y": _key("eval/pass1"), "skip_null": True},
        ]},
    }

    gen = col("performance/gen_tokens_per_s")
    wall = [None if t is None or s in (None, 0) else t / s
            for t, s in zip(col("performance/gen_tokens"), col("timing/step_s"))]
    throughput = {
        "data": [line("per second of generation", x, gen, 0), line("per second of wall time", x, wall, 1)],
        "layout": layout("Rollout throughput", "step", "tokens / s", height=280),
        "live": {"x": "step", "traces": [
            {"trace": 0, "y": _key("performance/gen_tokens_per_s")},
            {"trace": 1, "y": {"ratio": ["performance/gen_tokens", "timing/step_s"]}},
        ]},
    }

    phases = [("generate", "timing/generate_s"), ("score", "timing/score_s"), ("train", "timing/train_s"),
              ("eval", "timing/eval_s"), ("checkpoint", "timing/checkpoint_s")]
    patterns = ["", "/", ".", "x", "\\", "-"]  # bars differ by pattern as well as colour
    # The part of the step no phase accounts for: all of it for a run that reports only its step time
    # (TRL's step_time), the overhead between phases for the embedded trainer.
    rest = {"rest": ["timing/step_s", [key for _, key in phases]]}
    bars = [(name, col(key), _key(key)) for name, key in phases]
    bars.append(("other / not split by phase", [
        None if total is None else max(0.0, total - sum(v for v in parts if v is not None))
        for total, *parts in zip(col("timing/step_s"), *(col(key) for _, key in phases))], rest))
    timing = {
        "data": [{"type": "bar", "name": name, "x": x, "y": ys,
                  "marker": {"color": colour(i), "pattern": {"shape": patterns[i]}}}
                 for i, (name, ys, _) in enumerate(bars)],
        "layout": layout("Time per step by phase", "step", "seconds", height=280, barmode="stack", bargap=0.05),
        "live": {"x": "step", "traces": [{"trace": i, "y": spec} for i, (_, _, spec) in enumerate(bars)]},
    }

    quads = [("loss", "train/loss"), ("KL to base", "train/kl"), ("entropy", "train/entropy"),
             ("clip ratio", "train/clip_ratio")]
    data, axes = [], {}
    for i, (name, key) in enumerate(quads):
        suffix = "" if i == 0 else str(i + 1)
        data.append(line(name, x, col(key), i, xaxis=f"x{suffix}", yaxis=f"y{suffix}"))
        row, column = divmod(i, 2)
        axes[f"xaxis{suffix}"] = {"domain": [0.0, 0.46] if column == 0 else [0.54, 1.0],
                                  "anchor": f"y{suffix}", "gridcolor": "#e6e6e6",
                                  "title": {"text": "step" if row == 1 else ""}}
        axes[f"yaxis{suffix}"] = {"domain": [0.58, 1.0] if row == 0 else [0.0, 0.42], "anchor": f"x{suffix}",
                                  "gridcolor": "#e6e6e6", "title": {"text": name}}
    losses = {
        "data": data,
        "layout": {**layout("Loss, KL, entropy, clip ratio", height=380, hovermode="closest"), **axes},
        "live": {"x": "step", "traces": [{"trace": i, "y": _key(key)} for i, (_, key) in enumerate(quads)]},
    }

    costs = cost_ipd(cost_curve, baseline_pass1)
    figs = {"reward": reward, "throughput": throughput, "timing": timing, "losses": losses, "cost": costs}
    for fig in (reward, throughput, timing, losses):
        # The baseline (step 0) is an eval alone: until a training step, most charts have no value to draw.
        if not any(v is not None for trace in fig["data"] for v in trace["y"]):
            fig["empty"] = "No training step yet" if x else "No steps yet"
    if not cost_curve:
        costs["empty"] = "No eval with a cost yet"
    return figs


def cost_ipd(curve, baseline_pass1):
    """Cumulative dollars and intelligence per dollar at each eval, from costs.intelligence.score_cost_curve
    (its points and IPD are costs.intelligence.ipd_curve's, as the "costs" live event sends them)."""
    pts = ipd_curve(curve, baseline_pass1)
    fig = {
        "data": [
            line("cost so far (USD)", pts["step"], pts["usd"], 0, mode="lines+markers"),
            line("IPD (points / USD)", pts["step"], pts["ipd"], 1, yaxis="y2", mode="lines+markers",
                 marker={"symbol": "square"}),
        ],
        "layout": layout("Cost and intelligence per dollar, at each eval", "step", "USD", height=280,
                         yaxis2={"title": {"text": "points / USD"}, "overlaying": "y", "side": "right",
                                 "showgrid": False}),
    }
    # Cumulative dollars start at zero; without it a run of equal small amounts is drawn on a -1..1 axis.
    fig["layout"]["yaxis"].update(rangemode="tozero", tickformat="$.2~g")
    return fig


XMODES = {"step": "step", "time": "wall time (h since start)", "usd": "cost (USD)"}


def compare(jobs, xmode):
    """Eval score of several jobs on one chart; `jobs` is [(job, points)] with points {step, hours, usd, pass1}."""
    data = []
    for i, (job, points) in enumerate(jobs):
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"#{job.pk} {short(job.name)}",
            "x": [p[xmode] for p in points], "y": [_num(p["pass1"]) for p in points],
            "line": {"color": colour(i), "dash": DASHES[i % len(DASHES)], "width": 2},
            "marker": {"symbol": ["circle", "square", "diamond", "triangle-up", "x", "cross"][i % 6], "size": 8},
        })
    # The legend even for one job: it says which job the line is.
    return {"data": data, "layout": layout("Eval pass@1 against " + XMODES[xmode], XMODES[xmode],
                                           "pass@1 (points)", height=420, hovermode="closest", showlegend=True)}


def costs_by_day(stacks):
    """Stacked bars: `stacks` is [(name, idle, {day: usd})], idle stacks last; one bar per day; `empty` (what the
    page says instead) when no day has a cost.

    Heights are the unrounded dollars (rounding each to the cent drew nothing for a day of cheap
    jobs while the table showed money); the hover writes them as the pages do (costs.money)."""
    days = sorted({d for _, _, values in stacks for d in values})
    patterns = ["", "/", ".", "x", "\\", "-", "|", "+"]
    data = []
    for i, (name, idle, values) in enumerate(stacks):
        amounts = [values.get(d, 0) for d in days]
        data.append({"type": "bar", "name": short(name), "x": [d.isoformat() for d in days],
                     "y": [float(v) for v in amounts], "customdata": [usd_text(v) for v in amounts],
                     "hovertemplate": "%{customdata}",
                     "marker": {"color": "#9a9a94" if idle else colour(i),
                                "pattern": {"shape": "x" if idle else patterns[i % len(patterns)]}}})
    # The legend names the stacks even when there is one (Plotly hides a lone trace's); with nothing charged the
    # chart says so instead of drawing bare axes (dashboard.js sayEmpty).
    fig = {"data": data, "layout": layout("Cost by day", None, "USD", height=340, barmode="stack", showlegend=True,
                                          xaxis={"type": "category", "title": {"text": "day (UTC)"}})}
    if not days:
        fig["empty"] = "No costs in this period"
    return fig


def sparkline(values, width=120, height=28, xs=None):
    """SVG polyline points for a small inline chart of `values` (None skipped) at `xs` (default: their
    positions; the jobs page passes steps); '' when too few. dashboard.js draws the same when it extends one."""
    xs = range(len(values)) if xs is None else xs
    pts = [(x, v) for x, v in zip(xs, values) if _num(v) is not None]
    if len(pts) < 2:
        return ""
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    span = (hi - lo) or 1.0
    first = pts[0][0]
    run = (pts[-1][0] - first) or 1
    return " ".join(f"{(x - first) / run * (width - 2) + 1:.1f},{height - 2 - (v - lo) / span * (height - 4):.1f}"
                    for x, v in pts)


# -- external runs ------------------------------------------------------------------------

OTHER_GROUP = "other"


def metric_group(key):
    """The chart an external run's logged metric goes on: its prefix before the first "/" ("train",
    "val-core", "perf", ...), or OTHER_GROUP for a key without one (TRL's reward, kl, eval_reward ...).
    dashboard.js groups a key first seen live by the same rule."""
    prefix, sep, _ = key.partition("/")
    return prefix if sep and prefix else OTHER_GROUP


def run_metric_figures(series):
    """One chart per metric prefix of what an external run logged, a line per key, growing live.

    `series` is {key: ([steps], [values])} (tracking.models.Metric.series). Returns
    [(group, figure key, figure)], groups in name order with OTHER_GROUP last; each figure's `live`
    names its traces' raw keys, which the step events carry as they were logged.
    """
    groups = {}
    for key in sorted(series):
        groups.setdefault(metric_group(key), []).append(key)
    out = []
    for group in sorted(groups, key=lambda g: (g == OTHER_GROUP, g)):
        keys = groups[group]
        data = []
        for i, key in enumerate(keys):
            steps, values = series[key]
            name = key if group == OTHER_GROUP else key[len(group) + 1:]
            data.append(line(short(name, 48), steps, [_num(v) for v in values], i, mode="lines+markers",
                             marker={"size": 4}, meta=key))
        title = "Logged: unprefixed keys" if group == OTHER_GROUP else f"Logged: {group}/"
        fig = {"data": data, "layout": layout(esc(title), "step", None, height=300, showlegend=True),
               "live": {"x": "step", "group": group,
                        "traces": [{"trace": i, "y": {"key": k}, "skip_null": True} for i, k in enumerate(keys)]}}
        out.append((group, f"logged:{group}", fig))
    return out

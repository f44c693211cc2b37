"""The sweep page's Plotly figures, drawn from sweeps.figures.summary (nothing is computed here but where each
figure sits on a chart's axes)."""

import math

from dashboard.figures import BLACK, BLUE, GREEN, ORANGE, VERMILLION, colour, esc, layout
from sweeps import search

SYMBOLS = {"completed": ("circle", GREEN), "sweep": ("x", VERMILLION), "active": ("circle-open", BLUE),
           "other": ("square", ORANGE)}


def sweep_charts(s):
    return {"front": front(s), "parallel": parallel(s), "slices": slices(s), "spend": spend(s),
            "importance": importance(s)}


def _kind(r):
    if r["stopped_by_sweep"]:
        return "sweep"
    if r["status"] == "completed":
        return "completed"
    if r["status"] in ("queued", "running", "stopping"):
        return "active"
    return "other"


def _params(r):
    return ", ".join(f"{esc(k)}={v:.4g}" if isinstance(v, float) else f"{esc(k)}={esc(v)}"
                     for k, v in r["params"].items())


def _now(r):
    """The dollars a trial has spent so far (its job's cost), or where its curve ends if it has none yet."""
    return float(r["cost_usd"]) if r["cost_usd"] is not None else r["curve"][-1]["usd"]


def front(s):
    """Each trial's score against the dollars it had spent (its curve, thin, on to its dollars now) and where it is
    now (a marker by how it ended, at its newest score and its dollars), the front through the trials nothing beats."""
    title = "Score against dollars, each trial"
    rows = [r for r in s["trials"] if r["curve"]]
    if not rows:
        return {"empty": "No trial has a score yet: each draws its curve here as it reports scores and dollars.",
                "data": [], "layout": layout(title)}
    data = []
    for r in rows:
        # On to its dollars now, at its newest score: what it spent since it last scored (and the front's corner).
        xs, ys = [p["usd"] for p in r["curve"]] + [_now(r)], [p["score"] for p in r["curve"]] + [r["curve"][-1]["score"]]
        # Labelled where it ends ("trial N", in its colour), and named on hover along it.
        label = f"trial {r['number']}"
        data.append({"type": "scatter", "mode": "lines+text", "x": xs, "y": ys, "name": label, "showlegend": False,
                     "text": [""] * (len(xs) - 1) + [label], "textposition": "middle right",
                     "textfont": {"size": 10, "color": colour(r["number"])},
                     "line": {"color": colour(r["number"]), "width": 1}, "opacity": 0.6,
                     "hovertemplate": f"{label}: %{{y:.2f}} pts at $%{{x:.6f}}<extra></extra>"})
    names = {"completed": "completed", "sweep": "stopped by the sweep", "active": "running or queued",
             "other": "stopped, failed or out of budget"}
    for kind, label in names.items():
        mine = [r for r in rows if _kind(r) == kind]
        if not mine:
            continue
        symbol, color = SYMBOLS[kind]
        data.append({"type": "scatter", "mode": "markers", "name": label,
                     "x": [_now(r) for r in mine], "y": [r["curve"][-1]["score"] for r in mine],
                     "marker": {"symbol": symbol, "size": 10, "color": color, "line": {"width": 2, "color": color}},
                     "text": [f"trial {r['number']} (job {r['job_id']}): {_params(r)}" for r in mine],
                     "hovertemplate": "%{text}<br>%{y:.2f} pts at $%{x:.6f}<extra></extra>"})
    by_number = {r["number"]: r for r in s["trials"]}
    on = [by_number[n] for n in s["front"]]  # in order of dollars: the step rises where a dearer trial scores more
    if on:
        data.append({"type": "scatter", "mode": "lines", "line": {"shape": "hv", "color": BLACK, "width": 2},
                     "name": "the front: the highest score for its dollars",
                     "x": [float(r["cost_usd"]) for r in on], "y": [r["score"] for r in on], "hoverinfo": "skip"})
    out = layout(title, "dollars the trial had spent", "score (points)", height=380, hovermode="closest")
    out["xaxis"].update(tickprefix="$", tickformat=".3~r")
    return {"data": data, "layout": out}


def spend(s):
    """The sweep's dollars, trial by trial in the order they started, summed, against its budget."""
    title = "The sweep's dollars against its budget"
    rows = s["trials"]
    if not rows:
        return {"empty": "No trial yet.", "data": [], "layout": layout(title)}
    total, xs, ys = 0.0, [], []
    for r in rows:
        total += float(r["cost_usd"] or 0)
        xs.append(r["number"])
        ys.append(total)
    budget = float(s["budget_usd"])
    data = [{"type": "bar", "name": "trial's dollars", "x": xs, "y": [float(r["cost_usd"] or 0) for r in rows],
             "marker": {"color": BLUE}, "hovertemplate": "trial %{x}: $%{y:.6f}<extra></extra>"},
            {"type": "scatter", "mode": "lines+markers", "name": "the sweep's dollars so far", "x": xs, "y": ys,
             "line": {"color": BLACK}, "hovertemplate": "after trial %{x}: $%{y:.6f}<extra></extra>"}]
    out = layout(title, "trial", "dollars", height=300)
    out["yaxis"].update(tickprefix="$", tickformat=".3~r")
    out["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": budget, "y1": budget,
                      "line": {"color": VERMILLION, "dash": "dash", "width": 2}}]
    out["annotations"] = [{"xref": "paper", "x": 1, "y": budget, "xanchor": "right", "yanchor": "bottom",
                           "text": f"budget ${budget:,.2f}", "showarrow": False, "font": {"color": VERMILLION}}]
    out["xaxis"]["dtick"] = 1
    return {"data": data, "layout": out}


def importance(s):
    """Optuna's PED-ANOVA importance of each searched parameter for the sweep's objective: how much its values tell
    the best quarter of the trials from all of them."""
    title = "Parameter importance (Optuna's PED-ANOVA)"
    if not s["importance"]:
        return {"empty": "No importance yet: it needs two trials that ended with a score and dollars, told apart by "
                         "them (trials that all scored the same say nothing of their parameters).", "data": [],
                "layout": layout(title)}
    data = []
    for i, (target, shares) in enumerate(s["importance"].items()):
        names = sorted(shares, key=shares.get)
        data.append({"type": "bar", "orientation": "h", "name": f"for {target}", "y": [esc(n) for n in names],
                     "x": [shares[n] for n in names], "marker": {"color": colour(i)},
                     "hovertemplate": "%{y}: %{x:.0%} of the importance<extra>" + esc(target) + "</extra>"})
    out = layout(title, "share of the importance: how much its values tell the best quarter apart", None, height=260, barmode="group",
                 hovermode="closest")
    out["xaxis"]["tickformat"] = ".0%"
    out["xaxis"]["range"] = [0, 1]
    return {"data": data, "layout": out}


# -- Optuna's views of the study: parallel coordinates and slices ------------------------------------------------
# The same charts optuna.visualization draws (plot_parallel_coordinate, plot_slice), built here from the summary as
# the others are: the web process loads neither Optuna nor the plotly package for them. Drawn of the trials the
# search learnt from (told as ended, with a score and measured dollars: search.values), each axis of a searched
# parameter on its space's scale (log where it is log, a categorical one named by its values).

# Plotly's Cividis (read alike with the common colour-vision deficiencies), dark to light, less its two lightest
# yellows: a line in those is hard to see on white.
CIVIDIS = ["#00224e", "#123570", "#3b496c", "#575d6d", "#707173", "#8a8678", "#a59c74", "#c3b369"]
SCALE = [[i / (len(CIVIDIS) - 1), c] for i, c in enumerate(CIVIDIS)]
# The objectives' axes (search.values, in order): their names in words, whether more is better, and their ticks' unit.
AXES = {"per_dollar": [("points per dollar (net gain ÷ dollars)", True, "")],
        "front": [("score (points)", True, ""), ("dollars", False, "$")],
        "cheapest": [("dollars", False, "$")]}
WHAT = {"per_dollar": "points per dollar", "front": "score and dollars", "cheapest": "dollars"}
# Why a trial is not in the study's views, in the order said (written after a count: "2 still running").
LEFT_OUT = ["still running or queued", "still being charged", "interrupted", "failed", "outside the narrowed space",
            "with dollars not measured", "with no score", "with no gain or nothing charged"]
SLICE_COLUMNS = 3


def _left_out(r, outside):
    """Why trial row `r` is no result of the study (one of LEFT_OUT), or None when it is one (search.values decides
    the last)."""
    if r["interrupted"]:
        return "interrupted"
    if r["status"] in ("queued", "running", "stopping"):
        return "still running or queued"
    if r["settling"]:
        return "still being charged"
    if r["status"] == "failed":
        return "failed"
    if r["number"] in outside:
        return "outside the narrowed space"
    if r["cost_usd"] is None:
        return "with dollars not measured"
    if r["score"] is None or not math.isfinite(r["score"]):
        return "with no score"
    return None


def study_results(s):
    """([(trial row, [objective values], reached the target)], {why: trials}) of summary `s`: the trials the search
    learnt from, with what it was told of each (search.values), and how many were left out and why."""
    outside = set(s.get("outside_space") or ())
    out, left = [], {}
    for r in s["trials"]:
        why = _left_out(r, outside)
        told = None
        if why is None:
            told = search.values(s["objective"], search.Told(r["number"], r["params"], "ended", score=r["score"],
                                                             gain=r["gain_points"], usd=float(r["cost_usd"])),
                                 s["target_score"])
            why = None if told is not None else "with no gain or nothing charged"
        if why:
            left[why] = left.get(why, 0) + 1
        else:
            out.append((r, told[0], told[1] is None or told[1]["score"] <= 0))
    return out, left


def _left_text(left):
    """"Left out: 2 still running or queued, 1 failed." or ""."""
    parts = [f"{left[why]} {why}" for why in LEFT_OUT if left.get(why)]
    return "Left out: " + ", ".join(parts) + "." if parts else ""


def _study_empty(title, name, results, left):
    have = "none has yet" if not results else "one has so far"
    text = (f"No {name} yet: they need two trials that ended with a score and measured dollars; {have}. "
            f"{_left_text(left)}").strip()
    return {"empty": text, "data": [], "layout": layout(title)}


def _study_layout(s, title, results, left, **extra):
    """A study chart's layout: under its title, the trials left out and why (or that none was)."""
    out = layout(title, hovermode="closest", showlegend=s["objective"] == "cheapest", **extra)
    out["title"]["subtitle"] = {"text": _left_text(left) or f"every trial the search learnt from ({len(results)})"}
    out["margin"]["t"] = 64
    return out


def _ranks(points):
    """Each point's Pareto rank among `points` ([(score, dollars)]): 0 on the front, 1 on the front of the rest, ..."""
    ranks, rest, rank = [None] * len(points), list(range(len(points))), 0
    while rest:
        for i in search.front([points[j] for j in rest]):
            ranks[rest[i]] = rank
        rest = [j for j in rest if ranks[j] is None]
        rank += 1
    return ranks


def _shade(t):
    """The colour at `t` (0 to 1) along CIVIDIS."""
    t = min(max(t, 0.0), 1.0) * (len(CIVIDIS) - 1)
    i = min(int(t), len(CIVIDIS) - 2)
    a, b = (tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in CIVIDIS[i:i + 2])
    return "#" + "".join(f"{round(x + (y - x) * (t - i)):02x}" for x, y in zip(a, b, strict=True))


def _num(v, unit=""):
    return f"{unit}{v:.3g}"


def _axis(label, values, position, ticks, text):
    """A parallel-coordinates axis: each value's height on it (0 to 1, None where a trial has none), its ticks
    [(height, text)], and each value as the hover writes it."""
    heights = [None if v is None else position(v) for v in values]
    return {"label": label, "y": heights, "ticks": ticks, "text": ["" if v is None else text(v) for v in values]}


def _span(values, low, high):
    """`low` to `high`, widened to any of `values` beyond them (a trial drawn before the space was narrowed)."""
    given = [v for v in values if v is not None]
    return min([low, *given]), max([high, *given])


def _marks(low, high, log=False, integer=False, unit=""):
    """[(value, text)]: the ticks of an axis from `low` to `high`: its ends, and between them each power of ten on a
    log scale, whole numbers for an integer, quarters otherwise."""
    if log:
        marks = [low] + [10.0 ** k for k in range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)]
    elif integer:
        marks = list(range(math.ceil(low), math.floor(high) + 1, max(1, math.ceil((high - low) / 4))))
    else:
        marks = [low + (high - low) * k / 4 for k in range(4)]
    out = {}
    for m in [*marks, high]:
        out.setdefault(_num(m, unit), m)
    return [(m, text) for text, m in out.items()]


def _range_axis(label, values, low, high, log=False, integer=False, unit=""):
    """An axis from `low` to `high` (log10 where `log`), widened to any value beyond them."""
    low, high = _span(values, low, high)
    f = math.log10 if log else float
    lo, hi = f(low), f(high)
    if hi == lo:
        return _axis(label, values, lambda v: 0.5, [(0.5, _num(low, unit))], lambda v: _num(v, unit))
    return _axis(label, values, lambda v: (f(v) - lo) / (hi - lo),
                 [((f(m) - lo) / (hi - lo), text) for m, text in _marks(low, high, log, integer, unit)],
                 lambda v: f"{unit}{v:.6g}" if unit else (str(v) if integer else f"{v:.4g}"))


def _param_axis(d, values):
    if "choices" in d:
        choices = [str(c) for c in d["choices"]]
        k = len(choices)
        spot = {c: (i / (k - 1) if k > 1 else 0.5) for i, c in enumerate(choices)}
        return _axis(esc(d["name"]), [None if v is None else str(v) for v in values], lambda v: spot.get(v),
                     [(spot[c], esc(c)) for c in choices], esc)
    return _range_axis(esc(d["name"]), values, d["low"], d["high"], d["log"], d["integer"])


def parallel(s):
    """Optuna's parallel coordinates of the study: an axis for each searched parameter and one for each objective
    (last), a line for each trial the search learnt from, its colour by the objective (by Pareto rank for the
    front); the trials left out counted and why."""
    what = WHAT[s["objective"]]
    title = f"Each trial's parameters and its {what} (Optuna's parallel coordinates)"
    results, left = study_results(s)
    if len(results) < 2:
        return _study_empty(title, "parallel coordinates", results, left)
    axes = [_param_axis(d, [r["params"].get(d["name"]) for r, _, _ in results]) for d in s["space"]]
    for i, (label, _, unit) in enumerate(AXES[s["objective"]]):
        told = [v[i] for _, v, _ in results]
        axes.append(_range_axis(label, told, min(told), max(told), unit=unit))
    if s["objective"] == "front":
        colour_by, bar, better_high = _ranks([(v[0], v[1]) for _, v, _ in results]), "Pareto rank (0: the front)", False
    else:
        colour_by, (bar, better_high, _) = [v[0] for _, v, _ in results], AXES[s["objective"]][0]
    lo, hi = min(colour_by), max(colour_by)
    cmin, cmax = (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)

    def shade(v):  # the better, the darker (Cividis' dark end), as Optuna's Blues do
        t = (v - cmin) / (cmax - cmin)
        return _shade(1 - t if better_high else t)

    data = []
    # The worst first: the best are drawn last, over them.
    for j in sorted(range(len(results)), key=lambda j: colour_by[j] if better_high else -colour_by[j]):
        r, _, reached = results[j]
        label = f"trial {r['number']}"
        data.append({"type": "scatter", "mode": "lines+markers", "name": label, "showlegend": False,
                     "x": list(range(len(axes))), "y": [a["y"][j] for a in axes],
                     "customdata": [[a["label"], a["text"][j]] for a in axes],
                     "line": {"color": shade(colour_by[j]), "width": 2, "dash": "solid" if reached else "dot"},
                     "marker": {"size": 5, "color": shade(colour_by[j])}, "opacity": 0.8,
                     "hovertemplate": f"{label} (job {r['job_id']}): %{{customdata[0]}} %{{customdata[1]}}"
                                      "<extra></extra>"})
    if s["objective"] == "cheapest":  # Optuna's feasible and infeasible lines, named by the target
        for name, dash in ((f"reached the target score ({s['target_score']:g} pts)", "solid"), ("short of it", "dot")):
            data.append({"type": "scatter", "mode": "lines", "x": [None], "y": [None], "name": name,
                         "line": {"color": BLACK, "dash": dash, "width": 2}, "hoverinfo": "skip"})
    bar_spec = {"title": {"text": bar, "side": "right"}}
    if s["objective"] == "front":
        bar_spec["tickvals"] = list(range(int(hi) + 1))
    data.append({"type": "scatter", "mode": "markers", "x": [None, None], "y": [None, None], "showlegend": False,
                 "name": bar, "hoverinfo": "skip", "marker": {"color": [cmin, cmax], "cmin": cmin, "cmax": cmax,
                                                 "colorscale": SCALE, "reversescale": better_high,
                                                 "showscale": True, "colorbar": bar_spec}})
    out = _study_layout(s, title, results, left, height=400)
    out["xaxis"] = {"tickmode": "array", "tickvals": list(range(len(axes))), "ticktext": [a["label"] for a in axes],
                    "range": [-0.4, len(axes) - 0.7], "showgrid": False, "zeroline": False, "fixedrange": True}
    out["yaxis"] = {"range": [-0.08, 1.08], "visible": False, "fixedrange": True}
    out["shapes"] = [{"type": "line", "x0": i, "x1": i, "y0": 0, "y1": 1, "layer": "below",
                      "line": {"color": "#888888", "width": 1}} for i in range(len(axes))]
    out["annotations"] = [{"x": i, "y": y, "text": text, "showarrow": False, "xanchor": "right", "xshift": -4,
                           "font": {"size": 10, "color": "#555555"}}
                          for i, a in enumerate(axes) for y, text in a["ticks"]]
    return {"data": data, "layout": out}


def slices(s):
    """Optuna's slices of the study: for each searched parameter, the objective of each trial the search learnt
    from against its value (a row of them for each objective), its marker coloured by the trial's number (the order
    tried); the trials left out counted and why."""
    what = WHAT[s["objective"]]
    title = f"{what[0].upper()}{what[1:]} against each parameter (Optuna's slices)"
    results, left = study_results(s)
    if len(results) < 2:
        return _study_empty(title, "slices", results, left)
    space, objectives = s["space"], AXES[s["objective"]]
    cols = min(len(space), SLICE_COLUMNS)
    per = math.ceil(len(space) / cols)  # rows of one objective's slices
    rows = per * len(objectives)
    numbers = [r["number"] for r, _, _ in results]
    tick = max(1, math.ceil((max(numbers) - min(numbers)) / 6))  # whole trial numbers on the colour bar
    out = _study_layout(s, title, results, left, height=90 + 250 * rows)
    out["margin"]["r"] = 24
    del out["xaxis"], out["yaxis"]
    data = []
    for o, (label, _, unit) in enumerate(objectives):
        short = label.split(" (net")[0]  # "points per dollar": the long name runs off a slice's height
        first = o * len(space) + 1  # the subplot whose y axis this objective's others match
        for p, d in enumerate(space):
            k = first + p
            row, col = o * per + p // cols, p % cols
            xs = [r["params"].get(d["name"]) for r, _, _ in results]
            choice = "choices" in d
            points = [(str(x) if choice else x, v[o], n, r, ok)
                      for x, (r, v, ok), n in zip(xs, results, numbers, strict=True) if x is not None]
            for reached in (True, False):
                mine = [pt for pt in points if pt[4] is reached]
                if not mine and not reached:
                    continue
                marker = ({"color": [pt[2] for pt in mine], "colorscale": SCALE, "cmin": min(numbers),
                           "cmax": max(numbers), "size": 9, "line": {"width": 0.5, "color": "#555555"},
                           "showscale": k == 1, "colorbar": {"title": {"text": "trial (the order tried)",
                                                                       "side": "right"}, "dtick": tick}}
                          if reached else {"color": "#bbbbbb", "size": 9, "line": {"width": 0.5, "color": "#555555"}})
                data.append({"type": "scatter", "mode": "markers", "xaxis": f"x{_n(k)}", "yaxis": f"y{_n(k)}",
                             "name": f"{label} against {esc(d['name'])}" if reached else "short of the target score",
                             "showlegend": not reached and k == 1,
                             "x": [pt[0] for pt in mine], "y": [pt[1] for pt in mine], "marker": marker,
                             "customdata": [pt[2] for pt in mine],
                             "text": [f"job {pt[3]['job_id']}" for pt in mine],
                             "hovertemplate": f"trial %{{customdata}} (%{{text}}): {esc(d['name'])} %{{x}}, "
                                              f"{label} {unit}%{{y:.4g}}<extra></extra>"})
            gap = 0.03
            xaxis = {"domain": [col / cols + (gap if col else 0), (col + 1) / cols - (gap if col < cols - 1 else 0)],
                     "anchor": f"y{_n(k)}", "title": {"text": esc(d["name"]), "standoff": 4}, "gridcolor": "#e6e6e6",
                     "zeroline": False, "automargin": True, **_slice_scale(d, xs)}
            top = 1 - row / rows
            yaxis = {"domain": [max(0.0, top - (1 - 0.3) / rows), top], "anchor": f"x{_n(k)}", "gridcolor": "#e6e6e6",
                     "zeroline": False, "automargin": True, "tickprefix": unit, "tickformat": ".3~g",
                     "title": {"text": short if col == 0 else ""}}
            if k != first:
                yaxis["matches"] = f"y{_n(first)}"
            out[f"xaxis{_n(k)}"], out[f"yaxis{_n(k)}"] = xaxis, yaxis
    return {"data": data, "layout": out}


def _slice_scale(d, xs):
    """A slice's x axis for dimension `d`: its choices in the space's order, or its space's range (widened to the
    values `xs`) on its scale, ticked as the parallel coordinates' axis is."""
    if "choices" in d:
        return {"type": "category", "categoryorder": "array", "categoryarray": [str(c) for c in d["choices"]]}
    low, high = _span(xs, d["low"], d["high"])
    f = math.log10 if d["log"] else float  # Plotly takes a log axis' range in powers of ten, its ticks as values
    pad = (f(high) - f(low)) * 0.04 or 0.5
    marks = _marks(low, high, d["log"], d["integer"])
    return {"range": [f(low) - pad, f(high) + pad], "tickmode": "array", "tickvals": [m for m, _ in marks],
            "ticktext": [text for _, text in marks], **({"type": "log"} if d["log"] else {})}


def _n(k):
    """Subplot k's axes' suffix: Plotly names the first x and y, the rest x2, y2 ..."""
    return "" if k == 1 else str(k)

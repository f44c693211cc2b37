"""The sweep page's Plotly figures, drawn from sweeps.figures.summary (nothing is computed here)."""

from dashboard.figures import BLACK, BLUE, GREEN, ORANGE, VERMILLION, colour, esc, layout

SYMBOLS = {"completed": ("circle", GREEN), "sweep": ("x", VERMILLION), "active": ("circle-open", BLUE),
           "other": ("square", ORANGE)}


def sweep_charts(s):
    return {"front": front(s), "spend": spend(s), "importance": importance(s)}


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

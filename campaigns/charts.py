"""The campaign page's Plotly figures, drawn from campaigns.figures.summary (nothing is computed here)."""

from dashboard.figures import BLACK, colour, layout
from trainer.models import ENDED


def campaign_charts(campaign, s):
    return {"scores": scores(campaign, s), "cost_per_point": cost_per_point(s)}


def scores(campaign, s):
    """Each env's retention pass@1 against the campaign's cumulative dollars, run boundaries marked, and the
    projection drawn dashed with its interval, named as a projection."""
    if s["start"] is None and not any(r["after"] for r in s["runs"]):
        return {"empty": f"No retention eval yet. {s['start_unscored']}", "data": [],
                "layout": layout("Retention pass@1 against cumulative $")}
    data = []
    for i, env in enumerate(campaign.envs):
        xs, ys = [], []
        if s["start"] and env in s["start"]:
            xs.append(0.0)
            ys.append(s["start"][env])
        for r in s["runs"]:
            if r["after"] and env in r["after"]:
                xs.append(float(r["cumulative_usd"]))
                ys.append(r["after"][env])
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{env} pass@1", "x": xs, "y": ys,
                     "line": {"color": colour(i), "width": 2}, "marker": {"size": 8},
                     "hovertemplate": "$%{x:.6f}: %{y:.1f} pts<extra>" + env + "</extra>"})
    shapes, notes = [], []
    for r in s["runs"]:
        if r["status"] not in ENDED:
            continue  # a run still running has no end to mark yet
        x = float(r["cumulative_usd"])
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": "#888", "width": 1, "dash": "dot"}})
        notes.append({"x": x, "y": 1, "xref": "x", "yref": "paper", "text": f"end of run {r['n']} ({r['env']})",
                      "showarrow": False, "textangle": -90, "xanchor": "right", "yanchor": "top",
                      "font": {"size": 10, "color": "#555"}})
    p = s["projection"]
    if p.get("state") == "ok" and p.get("from_pass1") is not None:
        x0, y0 = float(s["cost_usd"]), p["from_pass1"]
        x1, y1 = x0 + float(p["usd"]), y0 + p["points"]
        error = {"type": "data", "symmetric": False, "arrayminus": [0, float(p["usd"]) - float(p["usd_low"])],
                 "color": BLACK}
        if p["usd_high"] is not None:
            error["array"] = [0, float(p["usd_high"]) - float(p["usd"])]
        data.append({"type": "scatter", "mode": "lines+markers", "x": [x0, x1], "y": [y0, y1],
                     "name": f"projection: +{p['points']} pts on {p['env']} (95% interval)",
                     "line": {"color": BLACK, "dash": "dash", "width": 2}, "marker": {"symbol": "diamond-open"},
                     "error_x": error})
    return {"data": data, "layout": {**layout("Retention pass@1 against cumulative $", "cumulative dollars",
                                              "pass@1 (points)", height=360),
                                     "shapes": shapes, "annotations": notes}}


def cost_per_point(s):
    """The campaign's dollars so far per net point so far, after each run, over time."""
    pts = [p for p in s["cost_per_point_over_time"] if p["at"] and p["usd_per_net_point"] is not None]
    if not pts:
        return {"empty": "No cost per point yet: it needs a net gain over the start and a cost.", "data": [],
                "layout": layout("Cost per net point, over time")}
    return {"data": [{"type": "scatter", "mode": "lines+markers", "name": "campaign $ so far ÷ net points so far",
                      "x": [p["at"] for p in pts], "y": [float(p["usd_per_net_point"]) for p in pts],
                      "text": [f"after run {p['n']}" for p in pts], "line": {"color": colour(0), "width": 2}}],
            "layout": _to_the_second(layout("Cost per net point, over time", "end of run (UTC)", "$ per point",
                                            height=280))}


def _to_the_second(out):
    """Runs a few seconds apart (a CPU campaign) would get plotly's millisecond ticks: dates to the second, at most."""
    out["xaxis"] = {**out.get("xaxis", {}), "type": "date", "tickformat": "%b %-d, %H:%M:%S",
                    "hoverformat": "%Y-%m-%d %H:%M:%S"}
    return out

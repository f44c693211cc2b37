"""The Hardware page: which device model buys a point cheapest, per environment (costs.tokens.hardware).

The period is the Costs page's (`from`/`to` dates or date-times, costs.report.parse_params) or a preset
`period` (7d, 30d, 90d, 365d) that names its `from`; `team` is one of the teams with jobs. `?format=csv`
downloads the same rows, money exact to the micro-dollar.
"""

import csv
import io
from datetime import timedelta
from urllib.parse import urlencode

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from costs import report, tokens
from costs.money import ipd_text, ipd_title, usd_text, usd_title
from trainer.models import Job
from yardstick.auth import require_role
from yardstick.http import bad_page
from yardstick.inputs import InputError
from yardstick.text import csv_text

PERIODS = {"7d": ("last 7 days", 7), "30d": ("last 30 days", 30), "90d": ("last 90 days", 90),
           "365d": ("last 365 days", 365)}
# Hardware is compared over many runs: a longer default than the Costs page's week.
DEFAULT_PERIOD = "90d"
FORMATS = ("", "csv")


def job_teams():
    """The teams that have jobs, sorted: the team filter's choices."""
    return list(Job.objects.exclude(team="").order_by("team").values_list("team", flat=True).distinct())


def hardware_params(params, teams, now=None):
    """(tokens.Filters, period key or "custom", format) from a query dict; InputError names a bad parameter and
    says what it accepts."""
    now = now or timezone.now()
    period = params.get("period", "")
    dates = {k: params[k] for k in ("from", "to") if params.get(k)}
    if period and dates:
        given = " and ".join(f"{k}={v}" for k, v in dates.items())
        raise InputError("period", f"give period or from/to, not both; got period={period} and {given}")
    if not dates:
        period = period or DEFAULT_PERIOD
        if period not in PERIODS:
            raise InputError("period", f"period must be one of {', '.join(PERIODS)} (or from/to dates), got {period!r}")
        dates = {"from": (now - timedelta(days=PERIODS[period][1])).date().isoformat()}
    span, _, _ = report.parse_params(dates, now=now)
    team = params.get("team", "").strip()
    if team and team not in teams:
        raise InputError("team", f"team must be one of the teams with jobs ({', '.join(teams) or 'none yet'}), "
                                 f"or empty for all teams; got {team!r}")
    fmt = params.get("format", "")
    if fmt not in FORMATS:
        raise InputError("format", f"format must be csv, or absent for the page; got {fmt!r}")
    return tokens.Filters(span.start, span.end, team), period or "custom", fmt


@require_GET
@require_role("viewer")
def hardware_page(request):
    teams = job_teams()
    try:
        filters, period, fmt = hardware_params(request.GET, teams)
    except InputError as err:
        return bad_page(request, err.field, err.message)
    rows = tokens.hardware(filters)
    if fmt == "csv":
        resp = HttpResponse(to_csv(rows), content_type="text/csv; charset=utf-8")
        resp["Content-Disposition"] = 'attachment; filename="hardware.csv"'
        return resp
    envs = {}
    for r in rows:
        envs.setdefault(r["env"], []).append({**r, "cells": _cells(r), "unranked": _unranked(r)})
    team_q = {"team": filters.team} if filters.team else {}
    last_day = (filters.end - timedelta(microseconds=1)).date()
    return render(request, "dashboard/hardware.html", {
        "envs": [{"env": env, "rows": env_rows} for env, env_rows in envs.items()],
        "teams": teams, "team": filters.team, "start": filters.start, "end": filters.end,
        "from_day": filters.start.date().isoformat(), "to_day": last_day.isoformat(),
        "periods": [{"key": k, "label": label, "current": k == period,
                     "href": "?" + urlencode({"period": k, **team_q})} for k, (label, _) in PERIODS.items()],
        # The exact period shown, so the download has the same rows as the page.
        "csv_href": "?" + urlencode({"from": filters.start.isoformat(), "to": filters.end.isoformat(), **team_q,
                                     "format": "csv"}),
        "any_simulated": any(r["simulated"] for r in rows), "any_example": any(r["example_prices"] for r in rows),
        "note": report.EXAMPLE_PRICES_NOTE,
    })


def _unranked(r):
    """Why a row has no rank, or ""."""
    if r["rank"] is not None:
        return ""
    return "fewer than two runs: not ranked" if r["runs"] < 2 else "no points gained: not ranked"


def _cells(r):
    """The row's figure cells, in the table's order: {text, title (the exact figure where the text rounds), runs
    (how many runs it is from), spread (their min–max as displayed, or ""), varies (whether min and max read
    differently: only then is the spread worth a line of its own)}."""
    d = r["displays"]

    def cell(text, runs, spread=None, fmt=tokens.ratio_text, title=""):
        lo, hi = (None, None) if spread is None else (fmt(spread[0]), fmt(spread[1]))
        return {"text": text, "title": title, "runs": runs, "spread": f"{lo}–{hi}" if lo else "", "varies": lo != hi}

    return [
        cell(tokens.ratio_text(r["tokens_per_device_s"]), r["token_runs"], r["tokens_per_device_s_spread"]),
        cell(tokens.ratio_text(r["tokens_per_joule"]), r["token_runs"], r["tokens_per_joule_spread"]),
        cell(d["generation"], r["generation_runs"], r["generation_spread"], fmt=usd_text,
             title=usd_title(r["generation_usd_per_million_tokens"])),
        cell(d["all_in"], r["runs"], r["usd_per_million_tokens_spread"], fmt=usd_text,
             title=usd_title(r["usd_per_million_tokens"])),
        cell(d["mtok_per_point"], r["scored_runs"]),
        cell(d["per_point"], r["scored_runs"], r["usd_per_point_spread"], fmt=usd_text, title=usd_title(r["usd_per_point"])),
        cell(d["ipd"], r["scored_runs"], r["points_per_usd_spread"], fmt=ipd_text, title=ipd_title(r["points_per_usd"])),
    ]


def to_csv(rows):
    """HARDWARE_CSV per row: money as the exact strings the rows hold, prices joined with "; ", names guarded
    against spreadsheet formulas as the cost review's CSV guards them."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(tokens.HARDWARE_CSV)
    for r in rows:
        cells = {**r, "env": csv_text(r["env"]), "model": csv_text(r["model"]), "prices": csv_text("; ".join(r["prices"]))}
        out.writerow(["" if cells[c] is None else str(cells[c]) for c in tokens.HARDWARE_CSV])
    return buf.getvalue()

"""Template helpers for the dashboard: the plotly.js URL, money and IPD, status badges, ages."""

import math

import plotly
from django import template
from django.urls import reverse
from django.utils.html import format_html

from costs import money
from dashboard import launched

register = template.Library()

# Each status has a shape as well as a colour, so it reads without colour vision.
STATUS_ICONS = {
    "queued": "…", "running": "▶", "stopping": "◼…", "stopped": "■", "completed": "✓", "failed": "✗",
    "budget_exhausted": "$✗",
}


@register.simple_tag
def plotly_src():
    return reverse("plotly-js", args=[plotly.__version__])


def _with_title(text, title):
    return format_html('<span title="{}">{}</span>', title, text) if title else text


@register.filter
def usd(value):
    """Dollars as every page and live update writes them (costs.money.usd_text); the exact figure on
    hover where that rounds."""
    return _with_title(money.usd_text(value), money.usd_title(value))


@register.filter
def job_cost(figures):
    """A job's cost as its money figures write it (costs.intelligence: `cost_display`, and on hover the exact figure,
    or why it is not measured)."""
    return _with_title(figures["cost_display"], figures.get("cost_title", ""))


@register.filter
def ipd(value):
    """Points per dollar as every page writes them (costs.money.ipd_text), the unrounded figure on hover."""
    return _with_title(money.ipd_text(value), money.ipd_title(value))


@register.simple_tag
def ipd_abbr(label="IPD"):
    """The abbreviation, spelled out and defined on hover: use it where "IPD" first appears on a page."""
    return format_html('<abbr title="{}">{}</abbr>', money.IPD_DEFINITION, label)


@register.simple_tag
def ipd_definition():
    """The one-line definition under a card or table that shows IPD."""
    return format_html('<p class="hint ipd-definition">{}. {}</p>', money.IPD_DEFINITION.capitalize(),
                       money.IPD_GROUPS_DEFINITION)


@register.filter
def num(value, places=1):
    # NaN: a figure not reported (an external run's rollouts have no advantage), not a number to print.
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{float(value):,.{int(places)}f}"


@register.filter
def age(seconds):
    if seconds is None:
        return "never"
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.0f} d ago"


@register.simple_tag
def status_badge(status):
    return format_html('<span class="status" data-status="{}"><span aria-hidden="true">{}</span> {}</span>',
                       status, STATUS_ICONS.get(status, "?"), status)


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def restart_refusal(job):
    """Why a launched job that ended cannot resume (so its controls offer Restart), or ""."""
    return launched.restart_refusal(job)


@register.simple_tag(takes_context=True)
def continuations(context, job):
    """The recipes a Continue of launched `job` can start (dashboard.launched.continuations), or []; the recipes that
    name {init_from} are read once per page, however many jobs a list shows."""
    if job.source != "launched":
        return []
    base = context.dicts[0]  # shared by the page's includes
    if "_init_from_recipes" not in base:
        base["_init_from_recipes"] = launched.init_from_recipes()
    return launched.continuations(job, base["_init_from_recipes"])

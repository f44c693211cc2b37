"""Template helpers for the dashboard: the plotly.js URL, money, status badges, ages."""

from decimal import Decimal

import plotly
from django import template
from django.urls import reverse
from django.utils.html import format_html

register = template.Library()

# Each status has a shape as well as a colour, so it reads without colour vision.
STATUS_ICONS = {
    "queued": "…", "running": "▶", "stopping": "◼…", "stopped": "■", "completed": "✓", "failed": "✗",
    "budget_exhausted": "$✗",
}


@register.simple_tag
def plotly_src():
    return reverse("plotly-js", args=[plotly.__version__])


@register.filter
def usd(value, places=2):
    if value is None or value == "":
        return "—"
    return f"${Decimal(str(value)):,.{int(places)}f}"


@register.filter
def num(value, places=1):
    if value is None or value == "":
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

"""The time range and live toggle of a page, read from and written to its URL.

`?range=1h` (15m, 1h, 6h, 24h, 7d) is relative to now; `?from=...&to=...` is a
custom window (ISO 8601, naive = UTC). `?live=0` pauses live updates (on by
default, and only meaningful for a window that ends now). Each range picks the
telemetry resolution that keeps a chart at a few thousand points per device.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode

from django.utils import timezone as djtz

from yardstick.inputs import InputError, check_moment

RANGES = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
DEFAULT_RANGE = "1h"
MAX_CUSTOM = timedelta(days=366)


def resolution_for(span):
    """raw up to 1 h (≤ 3,600 points a device at 1 s), 1-minute rollups up to 7 days, else 1-hour."""
    if span <= timedelta(hours=1):
        return "raw"
    if span <= timedelta(days=7):
        return "1m"
    return "1h"


@dataclass(frozen=True)
class TimeRange:
    key: str  # one of RANGES, or "custom"
    start: datetime
    end: datetime
    live: bool

    @property
    def span(self):
        return self.end - self.start

    @property
    def resolution(self):
        return resolution_for(self.span)

    @property
    def follows_now(self):
        """True when the window ends now, so new data belongs on the chart."""
        return self.key != "custom"

    @property
    def span_s(self):
        return self.span.total_seconds()

    def query(self, **overrides):
        """The URL query string for this range, with `overrides` (None drops a key)."""
        params = {"range": self.key} if self.key != "custom" else {
            "from": self.start.strftime("%Y-%m-%dT%H:%M"), "to": self.end.strftime("%Y-%m-%dT%H:%M")}
        if not self.live:
            params["live"] = "0"
        params.update(overrides)
        return urlencode({k: v for k, v in params.items() if v is not None})


def parse_time(field, raw):
    text = raw.strip()
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(field, f"{field} must be a time like 2025-01-31T12:00 (UTC), got {raw!r}") from None
    # 9999-12-31 overflowed where a page steps past it (500)
    return check_moment(field, value if value.tzinfo else value.replace(tzinfo=timezone.utc))


def from_request(params, now=None, default=DEFAULT_RANGE):
    """Return the TimeRange of a query dict; raise InputError naming the bad parameter."""
    now = now or djtz.now()
    live_raw = params.get("live", "1")
    if live_raw not in ("0", "1"):
        raise InputError("live", f"live must be 0 or 1, got {live_raw!r}")
    live = live_raw == "1"
    if params.get("from") or params.get("to"):
        start = parse_time("from", params.get("from", ""))
        end = parse_time("to", params["to"]) if params.get("to") else now
        if start >= end:
            raise InputError("from", f"from must be before to, got from={start:%Y-%m-%dT%H:%M} to={end:%Y-%m-%dT%H:%M}")
        if end - start > MAX_CUSTOM:
            raise InputError("to", f"a custom range may span at most {MAX_CUSTOM.days} days")
        return TimeRange("custom", start, end, live=False)
    key = params.get("range") or default
    if key not in RANGES:
        raise InputError("range", f"range must be one of {', '.join(RANGES)} (or from/to), got {key!r}")
    return TimeRange(key, now - RANGES[key], now, live)

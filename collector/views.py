"""JSON API: `GET /api/fleet` and `GET /api/devices/<uuid>/samples`. Viewer role and up."""

from datetime import datetime, timedelta, timezone

from django.http import JsonResponse
from django.utils import timezone as djtz
from django.views.decorators.http import require_GET

from collector import store
from collector.models import Device, DeviceEvent
from yardstick.auth import require_role
from yardstick.http import bad
from yardstick.inputs import InputError, check_moment

# The range a request without `from` covers at each resolution.
DEFAULT_RANGE = {"raw": timedelta(hours=1), "1m": timedelta(days=1), "1h": timedelta(days=30)}


@require_GET
@require_role("viewer")
def fleet(request):
    """Every node and its devices (collector.store.fleet), each device with "unhealthy": null, or the critical
    health event that makes it so ({kind, detail, ts}: DeviceEvent.unhealthy, one query for all devices)."""
    now = djtz.now()
    rows = store.latest_rows()
    events = DeviceEvent.unhealthy(now=now)
    by_uuid = {r["uuid"]: events[r["device_id"]] for r in rows if r["device_id"] in events}
    nodes = store.fleet(now, rows)
    for node in nodes:
        for device in node["devices"]:
            e = by_uuid.get(device["uuid"])
            device["unhealthy"] = None if e is None else {"kind": e.kind, "detail": e.detail, "ts": e.ts}
    return JsonResponse({"generated_at": now, "nodes": nodes})


@require_GET
@require_role("viewer")
def device_samples(request, uuid):
    device = Device.objects.filter(uuid=uuid).select_related("node").first()
    if device is None:
        return JsonResponse({"error": f"no device with uuid {uuid!r}"}, status=404)
    try:
        resolution, start, end = _series_params(request.GET)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(
        {
            "device": {**device.to_dict(), "node": device.node.name},
            "resolution": resolution,
            "from": start,
            "to": end,
            "points": store.device_series(device, start, end, resolution),
        }
    )


def _series_params(params):
    resolution = params.get("resolution", "1m")
    if resolution not in store.RESOLUTIONS:
        raise InputError("resolution", f"resolution must be one of {', '.join(store.RESOLUTIONS)}, got {resolution!r}")
    end = _time(params, "to") or djtz.now()
    start = _time(params, "from") or end - DEFAULT_RANGE[resolution]
    if start >= end:
        raise InputError("from", f"from must be before to, got from={start.isoformat()} to={end.isoformat()}")
    if end - start > store.MAX_RANGE[resolution]:
        limit = store.MAX_RANGE[resolution]
        raise InputError(
            "from", f"from..to may span at most {limit.days} day(s) at resolution {resolution}, "
            f"got {(end - start).total_seconds() / 86400:.1f} days; use a coarser resolution"
        )
    return resolution, start, end


def _time(params, name):
    """Parse an ISO 8601 time (naive means UTC) or Unix seconds; None when absent."""
    raw = params.get(name, "").strip()
    if not raw:
        return None
    try:
        value = datetime.fromtimestamp(float(raw), tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        try:
            value = datetime.fromisoformat(raw.replace(" ", "+") if raw.count(" ") == 1 and "T" in raw else raw)
        except ValueError:
            raise InputError(
                name, f"{name} must be an ISO 8601 time like 2025-01-31T12:00:00Z or Unix seconds, got {raw!r}"
            ) from None
    # 0001-01-01 less the default range overflowed (500)
    return check_moment(name, value if value.tzinfo else value.replace(tzinfo=timezone.utc))

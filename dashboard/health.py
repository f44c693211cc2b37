"""The state of every part of Yardstick, for /healthz and the header.

Each check returns {"ok": bool, "detail": str, ...} and never raises: a health
check that crashes tells nobody anything.
"""

import time

import redis
from django.conf import settings
from django.db import connection

from collector import store
from yardstick.celery import app
from yardstick.models import Heartbeat


def _timed(check):
    started = time.monotonic()
    try:
        result = check()
    except Exception as err:  # noqa: BLE001 - any failure of a dependency is its state, not ours
        result = {"ok": False, "detail": f"{type(err).__name__}: {err}"}
    result["ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


def check_database():
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchone()
    return {"ok": True, "detail": connection.vendor + " " + str(connection.pg_version)}


def _redis():
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)


def check_broker():
    _redis().ping()
    return {"ok": True, "detail": "redis answers"}


def check_worker():
    # A busy machine can take most of a second to answer; the ping waits this long regardless.
    replies = app.control.ping(timeout=1.0) or []
    names = sorted(name for reply in replies for name in reply)
    if not names:
        return {"ok": False, "detail": "no Celery worker answered a ping", "workers": []}
    return {"ok": True, "detail": f"{len(names)} worker(s) answered", "workers": names}


def check_beat():
    age = Heartbeat.age_s("beat")
    if age is None:
        return {"ok": False, "detail": "beat has never ticked", "age_s": None}
    ok = age <= settings.BEAT_STALE_S
    detail = f"last tick {age:.0f} s ago" + ("" if ok else f" (limit {settings.BEAT_STALE_S} s)")
    return {"ok": ok, "detail": detail, "age_s": round(age, 1)}


def newest_sample_age_s():
    """Seconds since the newest telemetry sample of any device, or None when there is none."""
    return store.newest_sample_age_s()


def check_collectors():
    age = newest_sample_age_s()
    if age is None:
        return {"ok": False, "detail": "no telemetry sample yet", "age_s": None}
    ok = age <= settings.COLLECTOR_STALE_S
    detail = f"newest sample {age:.0f} s old" + ("" if ok else f" (limit {settings.COLLECTOR_STALE_S} s)")
    return {"ok": ok, "detail": detail, "age_s": round(age, 1)}


CHECKS = {
    "database": check_database,
    "broker": check_broker,
    "worker": check_worker,
    "beat": check_beat,
    "collectors": check_collectors,
}


def report():
    """Return {"ok": all fine, "checks": {name: result}}. The database check runs first:
    the beat and collector checks read from it."""
    checks = {name: _timed(check) for name, check in CHECKS.items()}
    return {"ok": all(c["ok"] for c in checks.values()), "checks": checks}

"""The web process's handler, its request threads, database pool and cache connections (issue 29: what a
request costs)."""

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest
from asgiref.testing import ApplicationCommunicator
from django.test import Client

from tests.conftest import ROOT
from yardstick.web import OneThreadASGIHandler


def asgi_get(app, path, query=b"", cookie=None):
    """(status, body) of GET `path` through the ASGI application `app`, as Daphne would call it."""
    return asyncio.run(asgi_exchange(app, path, query, cookie))


async def asgi_exchange(app, path, query=b"", cookie=None):
    headers = [(b"host", b"testserver")] + ([(b"cookie", cookie.encode())] if cookie else [])
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 40000), "server": ("testserver", 80)}

    talk = ApplicationCommunicator(app, scope)
    await talk.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await talk.receive_output(20)
    body = b""
    while True:
        part = await talk.receive_output(20)
        body += part.get("body", b"")
        if not part.get("more_body"):
            break
    await talk.wait(20)
    return start["status"], body


def session_cookie(user, settings):
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


@pytest.mark.django_db(transaction=True)  # the request runs on a thread (and a connection) of its own
def test_the_web_handler_runs_the_middleware_and_the_view_as_one_synchronous_chain(viewer, settings):
    app = OneThreadASGIHandler()
    assert not asyncio.iscoroutinefunction(app._middleware_chain)  # WSGI's chain, not Django's async one
    cookie = session_cookie(viewer, settings)

    status, body = asgi_get(app, "/api/whoami", cookie=cookie)
    assert (status, body) == (200, b'{"username": "vera", "role": "viewer"}')
    # Every middleware still answers: the login wall, the refusal of unstorable text, a static file.
    assert asgi_get(app, "/api/whoami") == (401, b'{"error": "authentication required"}')
    status, body = asgi_get(app, "/api/whoami", query=b"q=%00", cookie=cookie)
    assert status == 400 and b"q" in body
    assert asgi_get(app, "/static/yardstick/dashboard.js")[0] == 200
    assert len(app._idle) == 1  # one request at a time: each borrowed the same thread and gave it back


@pytest.mark.django_db(transaction=True)
def test_at_most_web_threads_views_run_at_once_and_the_others_wait_their_turn(viewer, settings):
    from tests.platform import slow_urls

    settings.ROOT_URLCONF = "tests.platform.slow_urls"
    settings.WEB_THREADS = 2
    app = OneThreadASGIHandler()
    cookie = session_cookie(viewer, settings)
    slow_urls.running["most"] = 0

    async def six():
        return await asyncio.gather(*(asgi_exchange(app, "/slow", cookie=cookie) for _ in range(6)))

    began = time.monotonic()
    answers = asyncio.run(six())
    assert answers == [(200, b'{"user": "vera"}')] * 6  # every one served, none refused
    assert slow_urls.running["most"] == 2
    assert time.monotonic() - began >= 3 * 0.3  # six views of 0.3 s, two at a time


def test_web_threads_out_of_range_is_refused_naming_what_it_accepts():
    for value, message in (("0", "YARDSTICK_WEB_THREADS must be >= 1, got 0"),
                           ("41", "YARDSTICK_WEB_THREADS must be at most 40 (the web process's database connections), got 41"),
                           ("four", "YARDSTICK_WEB_THREADS must be an integer, got 'four'")):
        out = subprocess.run([sys.executable, "-c", "import yardstick.settings"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, env={**os.environ, "YARDSTICK_WEB_THREADS": value})
        assert out.returncode != 0 and message in out.stderr, (value, out.stderr[-500:])


def test_cache_objects_of_one_process_share_its_connections():
    from django.core.cache import caches

    mine = caches["default"]
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(caches["default"]))
    thread.start()
    thread.join()
    assert theirs[0] is not mine  # Django's: one cache object a thread (and a request under ASGI)
    assert theirs[0]._cache is mine._cache  # one client, so one pool, for the process
    assert mine._cache._get_connection_pool(write=False) is mine._cache._get_connection_pool(write=True)
    theirs[0].set("test-web-process", 42, 30)
    assert mine.get("test-web-process") == 42


def test_only_the_web_process_pools_its_database_connections():
    from django.db import connection

    assert connection.pool is None  # this process: a connection of its own, opened and closed as before
    probe = ("import yardstick.asgi; from django.db import connection as c; "
             "print(c.pool.min_size, c.pool.max_size, c.settings_dict['CONN_HEALTH_CHECKS'])")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "40", "True"]

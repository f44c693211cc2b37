"""The web process's handler, its request threads, database pool and cache connections (issue 29: what a
request costs)."""

import asyncio
import subprocess
import sys
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.test import Client

from tests.conftest import ROOT
from yardstick.web import OneThreadASGIHandler


def asgi_get(app, path, query=b"", cookie=None):
    """(status, body) of GET `path` through the ASGI application `app`, as Daphne would call it."""
    headers = [(b"host", b"testserver")] + ([(b"cookie", cookie.encode())] if cookie else [])
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 40000), "server": ("testserver", 80)}

    async def run():
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

    return asyncio.run(run())


@pytest.mark.django_db(transaction=True)  # the request runs on a thread (and a connection) of its own
def test_the_web_handler_runs_the_middleware_and_the_view_as_one_synchronous_chain(viewer, settings):
    app = OneThreadASGIHandler()
    assert not asyncio.iscoroutinefunction(app._middleware_chain)  # WSGI's chain, not Django's async one
    client = Client()
    client.force_login(viewer)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"

    status, body = asgi_get(app, "/api/whoami", cookie=cookie)
    assert (status, body) == (200, b'{"username": "vera", "role": "viewer"}')
    # Every middleware still answers: the login wall, the refusal of unstorable text, a static file.
    assert asgi_get(app, "/api/whoami") == (401, b'{"error": "authentication required"}')
    status, body = asgi_get(app, "/api/whoami", query=b"q=%00", cookie=cookie)
    assert status == 400 and b"q" in body
    assert asgi_get(app, "/static/yardstick/dashboard.js")[0] == 200
    assert len(app._idle) == 1  # one request at a time: each borrowed the same thread and gave it back


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

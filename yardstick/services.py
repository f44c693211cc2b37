"""Start the embedded servers a process needs, and stop only those it started."""

import contextlib

from yardstick import embedded


@contextlib.contextmanager
def embedded_services_for_command(redis=True):
    """Run the body with the embedded PostgreSQL (and Redis) up, when the settings use them.

    A server that already runs (an `up` on the same data dir) is used and left
    running; one this call started is stopped on the way out.
    """
    from django.conf import settings

    started = []
    try:
        if settings.EMBEDDED_DB:
            pg = embedded.EmbeddedPostgres(settings.DATA_DIR)
            if pg.start():
                started.append(pg)
            pg.ensure_database()
        if redis and settings.EMBEDDED_REDIS:
            rd = embedded.EmbeddedRedis(settings.DATA_DIR)
            if rd.start(daemonize=True):
                started.append(rd)
        yield
    finally:
        for server in reversed(started):
            server.stop()

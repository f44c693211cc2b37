"""Start the embedded servers a process needs, and stop only those it started; never those of a running `up`."""

import contextlib
import time

from yardstick import embedded
from yardstick.runner import DataDirLock

# How long a command waits for servers that a running `up` owns: its supervisor
# restarts a dead one within seconds, a slow PostgreSQL start takes up to a minute.
UP_SERVERS_WAIT_S = 90.0


@contextlib.contextmanager
def embedded_services_for_command(redis=True):
    """Run the body with the embedded PostgreSQL (and Redis) up, when the settings use them.

    A server that already runs is used and left running; one this call started
    is stopped on the way out. While an `up` holds the data dir, the servers are
    its own: the command waits for them and never starts or stops one, since a
    second postmaster on the same data, stopped by the command, would pull the
    database from under `up`'s children.
    """
    from django.conf import settings

    owner = DataDirLock(settings.DATA_DIR).held_by()
    if owner is not None:
        wait_for_servers_of_up(settings.DATA_DIR, owner, postgres=settings.EMBEDDED_DB, pg_port=settings.PG_PORT,
                               redis=redis and settings.EMBEDDED_REDIS)
        yield
        return
    started = []
    try:
        if settings.EMBEDDED_DB:
            pg = embedded.EmbeddedPostgres(settings.DATA_DIR, port=settings.PG_PORT)
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


def wait_for_servers_of_up(data_dir, owner, postgres=True, redis=True, wait_s=UP_SERVERS_WAIT_S,
                           pg_port=embedded.PG_PORT):
    """Wait until the embedded servers that `owner` (a running `up`) keeps are answering.

    Raise ServiceError naming the servers still down, the owner and where to look
    when they are not up within `wait_s`.
    """
    pg = embedded.EmbeddedPostgres(data_dir, port=pg_port) if postgres else None
    rd = embedded.EmbeddedRedis(data_dir) if redis else None
    deadline = time.monotonic() + wait_s
    while True:
        down = []
        if pg is not None and not pg.accepts_connections():
            down.append(f"PostgreSQL (socket in {pg.socket_dir})")
        if rd is not None and not rd.ping():
            down.append(f"Redis ({rd.socket_path})")
        if not down or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if down:
        raise embedded.ServiceError(
            f"{' and '.join(down)} not answering after {wait_s:.0f} s; {owner} owns the servers of "
            f"this data dir ({data_dir}), so this command neither starts nor stops them: "
            "see that `up`'s output for why they are down"
        )


# Commands that run without Yardstick's tables, or that bring them up to date themselves.
NO_SCHEMA_COMMANDS = {
    "migrate", "makemigrations", "showmigrations", "sqlmigrate", "squashmigrations", "optimizemigration",
    "dbshell", "inspectdb", "diffsettings", "collectstatic", "findstatic", "sqlflush", "sqlsequencereset",
    "startapp", "startproject", "compilemessages", "makemessages", "test", "testserver", "check",
    "sendtestemail", "createcachetable", "shell", "up", "help", "version",
}


class SchemaError(embedded.ServiceError):
    """The database's schema is behind the code and this command will not change it; says what to run."""


def ensure_schema(command, say=print):
    """Before `command` touches the database, bring its schema up to date or refuse.

    With the embedded PostgreSQL and no `up` running, this process owns the
    database: pending migrations are applied (a fresh data dir gets its tables
    on its first command, whichever it is). A server of DATABASE_URL, or one a
    running `up` keeps, is not migrated behind its owner's back: raise
    SchemaError with the one line to run.
    """
    import django
    from django.conf import settings
    from django.core.management import call_command, get_commands
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    django.setup()  # the command's own setup repeats this at no cost
    if command in NO_SCHEMA_COMMANDS or command not in get_commands():
        return  # an unknown command: Django says so

    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if not pending:
        return
    if settings.EMBEDDED_DB and DataDirLock(settings.DATA_DIR).held_by() is None:
        say(f"applying {len(pending)} migration(s) to the database in {settings.DATA_DIR} before {command}")
        call_command("migrate", interactive=False, verbosity=0)
        return
    raise SchemaError(
        f"the database schema is behind this code ({len(pending)} migration(s) not applied); "
        "run: python manage.py migrate"
    )

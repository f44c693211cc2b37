"""Shared fixtures: real PostgreSQL and Redis, users in each role, API tokens.

With no DATABASE_URL / REDIS_URL the suite starts the embedded servers under
YARDSTICK_DATA_DIR (`make test` uses var/test) once per session, and
pytest-django creates a fresh test database on them; with the variables set it
uses those servers and starts nothing.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUTPUT_DIR = ROOT / "test-output"
# The environment of this test process before any test changed it, for the servers shared by its tests.
SESSION_ENVIRON = dict(os.environ)


@pytest.fixture(scope="session")
def embedded_services():
    from yardstick.services import embedded_services_for_command

    with embedded_services_for_command():
        yield


@pytest.fixture(scope="session")
def django_db_setup(embedded_services, django_db_setup, django_db_blocker):
    """pytest-django's test database, on servers that are certainly up."""
    yield
    # Server threads and subprocesses of browser tests may still hold a session;
    # end them so the test database can be dropped.
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
def pg_dsn(django_db_setup, transactional_db):
    """A libpq DSN for the migrated test database, for code that connects with psycopg itself."""
    from django.db import connection

    return connection_dsn(connection.settings_dict)


def database_url():
    """A DATABASE_URL naming the test database, for the processes a test starts."""
    from urllib.parse import quote

    from django.db import connection

    cfg = connection.settings_dict
    host = cfg.get("HOST") or "localhost"
    auth = quote(cfg.get("USER") or "", safe="")
    if cfg.get("PASSWORD"):
        auth += ":" + quote(cfg["PASSWORD"], safe="")
    return f"postgresql://{auth}@{quote(host, safe='')}:{cfg.get('PORT') or 5432}/{cfg['NAME']}"


# Real files written by nvidia-smi and dcgm-exporter on real machines, kept in the
# repository (tests/data/telemetry/SOURCES.md says where each came from).
TELEMETRY_DATA = ROOT / "tests" / "data" / "telemetry"


@pytest.fixture(scope="session")
def telemetry_data():
    """The folder of real telemetry captured on real machines (tests/data/telemetry)."""
    if not TELEMETRY_DATA.is_dir():
        pytest.fail(f"the real telemetry files are missing: expected them in {TELEMETRY_DATA}")
    return TELEMETRY_DATA


def connection_dsn(cfg):
    """A libpq DSN for Django's database settings: the one `manage.py collect` hands the agent."""
    from collector.management.commands.collect import settings_dsn

    return settings_dsn(cfg)


@pytest.fixture
def service_dir():
    """A throwaway data dir for embedded servers, removed afterwards.

    Not under pytest's tmp_path: PostgreSQL runs as another user and must
    traverse the path, and every pytest session resets /tmp/pytest-of-<user>
    to mode 0700.

    Removed by a thread while the next tests run: PostgreSQL fsyncs its files,
    and unlinking a thousand synced files waits seconds on the disk (about 3 ms
    each where the filesystem discards freed blocks), time no test needs to
    wait for. The thread is not a daemon, so the process ends after it.
    """
    import shutil
    import threading
    import uuid

    path = ROOT / "var" / "test-services" / uuid.uuid4().hex[:12]
    path.mkdir(parents=True)
    yield path
    threading.Thread(target=shutil.rmtree, args=(path,), kwargs={"ignore_errors": True},
                     name=f"remove {path.name}").start()


@pytest.fixture
def embedded_pg_factory(service_dir):
    """Make throwaway embedded PostgreSQL servers (each in its own folder); stops them at the end."""
    from yardstick.embedded import EmbeddedPostgres

    servers = []

    def make(path=None):
        server = EmbeddedPostgres(path or service_dir / f"pg{len(servers)}")
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


# Tables Django does not manage (partitioned telemetry), so its flush after a
# transactional test leaves them alone.
UNMANAGED_TABLES = (
    "telemetry_device_event, telemetry_device_holder, telemetry_rollup_pending, telemetry_rollup_1h, telemetry_rollup_1m, "
    "telemetry_latest, telemetry_sample, collector_device, collector_node"
)


@pytest.fixture(autouse=True)
def empty_unmanaged_tables_after_transactional_tests(request, django_db_blocker):
    """What one test committed to the telemetry tables must not reach the next."""
    yield
    marker = request.node.get_closest_marker("django_db")
    marked = marker is not None and marker.kwargs.get("transaction", False)
    if not marked and not {"transactional_db", "live_server", "pg_dsn"} & set(request.fixturenames):
        return
    from django.db import connection, transaction

    with django_db_blocker.unblock(), transaction.atomic(), connection.cursor() as cur:
        # Writers still finishing commit first, as they would before a TRUNCATE. Most tests leave these
        # tables empty, and a TRUNCATE of empty tables still costs new files (see empty_tables_by_delete).
        cur.execute(f"LOCK TABLE {UNMANAGED_TABLES} IN SHARE ROW EXCLUSIVE MODE")
        cur.execute("SELECT " + " OR ".join(f"EXISTS (SELECT FROM {t})" for t in UNMANAGED_TABLES.split(", ")))
        if cur.fetchone()[0]:
            cur.execute(f"TRUNCATE {UNMANAGED_TABLES} RESTART IDENTITY")
        else:  # what RESTART IDENTITY does: their sequences (node and device ids) start again
            cur.execute(
                "SELECT setval(s.seqrelid, s.seqstart, false) FROM pg_sequence s JOIN pg_depend d "
                "ON d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid AND d.deptype IN ('a', 'i') "
                "WHERE d.refobjid = ANY(%s::regclass[])", [UNMANAGED_TABLES.split(", ")])


# Written by migrate and by Django's post_migrate signal, which writes them again after every flush (a
# content type and the permissions of each model: about 0.4 s each time). The flush keeps them instead.
KEPT_BY_FLUSH = {"django_content_type", "auth_permission"}


@pytest.fixture(scope="session", autouse=True)
def empty_tables_by_delete():
    """Django empties the database after each transactional test with one TRUNCATE of every table.

    A TRUNCATE gives each table and index new files and hands the old ones back to the disk, which
    costs 0.1 to 0.8 s on this suite's 29 tables (most where the filesystem discards freed blocks), and
    the suite runs over a hundred transactional tests. A DELETE FROM each table, which holds a few rows,
    costs a few hundredths of a second. The foreign keys are deferred to the commit, so the order of the
    DELETEs does not matter; the lock first waits for writers still finishing, as TRUNCATE's does.

    The content types and permissions are kept (the same rows post_migrate would write back), and so
    post_migrate's two receivers that write them are left out of that flush; any other receiver runs.
    A flush that resets sequences or cascades is left to Django as it is.
    """
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations
    from django.db.models.signals import post_migrate

    truncate, emit = DatabaseOperations.sql_flush, flush.emit_post_migrate_signal
    kept = {"rows": False}  # whether the flush just planned kept KEPT_BY_FLUSH's rows
    auth_uid = "django.contrib.auth.management.create_permissions"

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        kept["rows"] = not (reset_sequences or allow_cascade or not tables)
        if not kept["rows"]:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        names = [style.SQL_FIELD(self.quote_name(table)) for table in tables if table not in KEPT_BY_FLUSH]
        return [f"LOCK TABLE {', '.join(names)} IN SHARE ROW EXCLUSIVE MODE;",
                *(f"DELETE FROM {name};" for name in names)]

    def emit_post_migrate_signal(*args, **kwargs):
        if not kept["rows"]:
            return emit(*args, **kwargs)
        post_migrate.disconnect(create_permissions, dispatch_uid=auth_uid)
        post_migrate.disconnect(create_contenttypes)
        try:
            emit(*args, **kwargs)
        finally:  # in the order the apps connected them
            post_migrate.connect(create_permissions, dispatch_uid=auth_uid)
            post_migrate.connect(create_contenttypes)
        # The roles' groups, as the migrations made them (yardstick/migrations 0002, 0003): a test after this one
        # finds them as on a migrated database (manage.py create_token --create reporter looks its group up).
        from django.contrib.auth.models import Group

        from yardstick.auth import REPORTER, ROLES

        Group.objects.bulk_create([Group(name=name) for name in (*ROLES, REPORTER)], ignore_conflicts=True)
        # And the example price book (costs/migrations/0001): a test after this one finds a fresh install's prices.
        from costs.prices import install_examples

        install_examples()

    DatabaseOperations.sql_flush, flush.emit_post_migrate_signal = sql_flush, emit_post_migrate_signal
    yield
    DatabaseOperations.sql_flush, flush.emit_post_migrate_signal = truncate, emit


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    """Hashing a test user's password the production way costs ~0.3 s each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _user(username, group):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user(username, password="pw-" + username)
    if group:
        # get_or_create: a transactional test before this one flushed the migration's rows.
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


@pytest.fixture
def viewer(db):
    return _user("vera", "viewer")


@pytest.fixture
def operator(db):
    return _user("otto", "operator")


@pytest.fixture
def admin_user(db):
    return _user("ada", "admin")


@pytest.fixture
def outsider(db):
    """Logged in, but in no role."""
    return _user("oscar", None)


@pytest.fixture
def api_token(db):
    from yardstick.models import ApiToken

    def issue(user):
        token, _ = ApiToken.issue(user, "test")
        return token

    return issue


@pytest.fixture(scope="session")
def chromium():
    """This test process's one Playwright driver and Chromium (tests/browser.py), stopped at the session's end."""
    from tests.browser import Chromium

    shared = Chromium()
    yield shared
    shared.stop()


@pytest.fixture(scope="session")
def shared_web(django_db_setup, tmp_path_factory):
    """The one Daphne of this test process's live_web tests (tests/dashboard/live_stack.py), started at the first
    and again should it have died; a call returns it, running."""
    from tests.dashboard.live_stack import LiveStack

    stacks = []

    def running():
        if not stacks or not stacks[-1].alive():
            if stacks:
                stacks[-1].stop()
            stacks.append(LiveStack(tmp_path_factory.mktemp("live-web"), worker=False, environ=SESSION_ENVIRON).start())
        return stacks[-1]

    yield running
    if stacks:
        stacks[-1].stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on its test (`report_setup`, `report_call`): the browser's `page` saves a screenshot
    on the way out of a test that failed."""
    report = (yield).get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="session")
def output_dir():
    """Where tests leave screenshots and other artefacts for people to look at."""
    OUTPUT_DIR.mkdir(exist_ok=True)
    return OUTPUT_DIR


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(*args, env=None, timeout=120):
    """Run `manage.py ARGS` in a real subprocess; return the CompletedProcess."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout,
    )


def forget_mlflow_state():
    """End this process's MLflow runs and forget its experiment: `mlflow.set_experiment` also sets the
    MLFLOW_EXPERIMENT_ID environment variable, which a later test's client would otherwise inherit."""
    import mlflow
    from mlflow.tracking import fluent
    from mlflow.tracking._tracking_service.utils import is_tracking_uri_set

    try:
        # With no tracking URI nothing was logged here, and asking for the store would make
        # MLflow's default one: an mlflow.db in the working directory.
        if is_tracking_uri_set():
            mlflow.flush_async_logging()
            while mlflow.active_run():
                mlflow.end_run()
    except Exception:  # noqa: BLE001 - the test revoked the token or broke the run on purpose: forget the run
        pass
    fluent._active_run_stack.get().clear()
    fluent._active_experiment_id = None
    for name in ("MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID"):
        os.environ.pop(name, None)


@pytest.fixture(autouse=True)
def _mlflow_forgotten_after_each_test():
    yield
    if "mlflow" in sys.modules:
        forget_mlflow_state()



@pytest.fixture(autouse=True)
def _loggers_as_configured():
    """Each test starts with the root logger at the settings' level and the agent's logger propagating to it,
    where caplog listens. An in-process Celery worker (the celery_worker fixture) sets the root logger to
    ERROR, and the agent's command run in-process (`manage.py collect`) gives the agent's logger its own
    handler and stops propagation; after either, a later test's caplog missed the agent's warnings (which
    tests, depended on the order they ran in)."""
    import logging

    from django.conf import settings

    logging.root.setLevel(settings.LOGGING["root"]["level"])
    logger = logging.getLogger("collector.agent")
    logger.handlers[:], logger.propagate, logger.disabled, logger.level = [], True, False, logging.NOTSET


@pytest.fixture(autouse=True)
def _sigint_as_python_sets_it():
    """Each test starts with Ctrl-C (SIGINT) handled as Python sets it. Code an earlier test ran in this process
    can leave SIGINT ignored (a Celery pool's or a rank's start-up ignores it), and an ignored signal stays ignored
    in every process started after: a `bash -c "up | tee"` then ignored the Ctrl-C of test_up_stops."""
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield

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
    """
    import shutil
    import uuid

    path = ROOT / "var" / "test-services" / uuid.uuid4().hex[:12]
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
    "telemetry_device_holder, telemetry_rollup_pending, telemetry_rollup_1h, telemetry_rollup_1m, "
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
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute(f"TRUNCATE {UNMANAGED_TABLES} RESTART IDENTITY")


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

    try:
        mlflow.flush_async_logging()
        while mlflow.active_run():
            mlflow.end_run()
    except Exception:  # the test revoked the token or broke the run on purpose: forget the run
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

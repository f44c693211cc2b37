"""Fixtures for the telemetry tests: real telemetry files, a writer on the test database."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # so tests can `import fake_pynvml`

DATA = HERE.parent.parent.parent / "shared" / "data" / "telemetry"
TELEMETRY_TABLES = (
    "telemetry_device_holder, telemetry_rollup_pending, telemetry_rollup_1h, telemetry_rollup_1m, "
    "telemetry_latest, telemetry_sample, collector_device, collector_node"
)


@pytest.fixture(scope="session")
def telemetry_data():
    """The folder of real telemetry files (../shared/data/telemetry)."""
    if not DATA.is_dir():
        pytest.skip(f"real telemetry files not found at {DATA}")
    return DATA


@pytest.fixture
def pg_conn(db):
    """Django's own psycopg connection, inside the test's transaction (rolled back after)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT 1")  # BEGIN now, so writer transactions nest as savepoints
    return connection.connection


@pytest.fixture
def telemetry_dsn(pg_dsn):
    """pg_dsn, with the telemetry tables emptied afterwards (Django's flush skips unmanaged tables)."""
    yield pg_dsn
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TELEMETRY_TABLES} RESTART IDENTITY")

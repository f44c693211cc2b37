"""Fixtures for the telemetry tests: real telemetry files, a writer on the test database."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # so tests can `import fake_pynvml`




@pytest.fixture
def pg_conn(db):
    """Django's own psycopg connection, inside the test's transaction (rolled back after)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT 1")  # BEGIN now, so writer transactions nest as savepoints
    return connection.connection


@pytest.fixture
def telemetry_dsn(pg_dsn):
    """pg_dsn; the root conftest empties the telemetry tables afterwards."""
    return pg_dsn

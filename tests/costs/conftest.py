"""Fixtures for the cost tests; the builders live in cost_builders.py (importable: this folder is on sys.path)."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # so tests can `import cost_builders`

DATA = HERE.parent.parent.parent / "shared" / "data" / "telemetry"
TELEMETRY_TABLES = (
    "telemetry_device_holder, telemetry_rollup_pending, telemetry_rollup_1h, telemetry_rollup_1m, "
    "telemetry_latest, telemetry_sample, collector_device, collector_node"
)


@pytest.fixture
def fleet(db):
    from cost_builders import Fleet

    return Fleet()


@pytest.fixture(scope="session")
def telemetry_data():
    if not DATA.is_dir():
        pytest.skip(f"real telemetry files not found at {DATA}")
    return DATA


@pytest.fixture
def clean_telemetry(transactional_db):
    """For tests whose data must be committed: empty the unmanaged telemetry tables afterwards."""
    yield
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(f"TRUNCATE {TELEMETRY_TABLES} RESTART IDENTITY")

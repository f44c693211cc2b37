"""Fixtures for the cost tests; the builders live in cost_builders.py (importable: this folder is on sys.path)."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # so tests can `import cost_builders`



@pytest.fixture
def fleet(db):
    from cost_builders import Fleet

    return Fleet()



@pytest.fixture
def clean_telemetry(transactional_db):
    """For tests whose data must be committed; the root conftest empties the telemetry tables afterwards."""

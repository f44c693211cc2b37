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


@pytest.fixture(autouse=True)
def no_fleet_totals_left_by_earlier_tests(request):
    """Today's fleet totals wait in the shared Redis cache for minutes (costs/live.py): start without them."""
    if {"db", "transactional_db"} & set(request.fixturenames):
        from django.core.cache import cache
        from django.utils import timezone

        from costs.live import fleet_today_key

        request.getfixturevalue("embedded_services")
        cache.delete(fleet_today_key(timezone.now().date()))

"""Fixtures for the dashboard tests: logged-in clients per role."""

import pytest


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture(autouse=True)
def no_fleet_totals_left_by_earlier_tests(request):
    """Today's fleet totals wait in the shared Redis cache for minutes (costs/live.py); a test that
    reads the fleet page must compute its own, not see the last test's."""
    if {"db", "transactional_db"} & set(request.fixturenames):
        from django.core.cache import cache
        from django.utils import timezone

        from costs.live import fleet_today_key

        request.getfixturevalue("embedded_services")
        cache.delete(fleet_today_key(timezone.now().date()))

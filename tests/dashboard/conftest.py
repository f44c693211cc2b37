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

"""Fixtures for the tracking API: the real `mlflow` client pointed at a live Yardstick.

`mlflow_as(user)` points MLflow's client (fluent API and MlflowClient) at
pytest-django's live server with a fresh API token of `user`, exactly as a
training run is configured (MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN), and
returns an MlflowClient. `mlflow_client` is that for a reporter. Afterwards any
fluent run left active is ended and the fluent experiment forgotten, so one
test's state never reaches the next.
"""

import pytest

from tests.conftest import _user


@pytest.fixture
def reporter(db):
    """A user in the narrow reporter role: may write runs through the tracking API, nothing else."""
    return _user("rita", "reporter")


@pytest.fixture
def mlflow_as(live_server, api_token, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    def connect(user):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", live_server.url)
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", api_token(user))
        # A refused call fails at once instead of being retried with back-off for minutes.
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        mlflow.set_tracking_uri(live_server.url)
        return MlflowClient(tracking_uri=live_server.url)

    yield connect
    _reset_fluent_state()


@pytest.fixture
def mlflow_client(mlflow_as, reporter):
    """The real MlflowClient against the live server, as a reporter (the fluent `mlflow.*` API is set up too)."""
    return mlflow_as(reporter)


def _reset_fluent_state():
    from tests.conftest import forget_mlflow_state

    forget_mlflow_state()

"""Whether an operator pressed Stop on this run in Yardstick.

Yardstick answers `runs/get` for a run whose job an operator asked to stop
with the computed tag `yardstick.stop_requested` = "true". Asking costs one
HTTP request, so a run asks at most once every `YARDSTICK_STOP_CHECK_S`
seconds (default 10); a stop, once seen, is remembered. When Yardstick cannot
be reached the answer is "go on": a dashboard outage must not end training.
"""

import logging
import os
import time

import mlflow
from mlflow.tracking import MlflowClient

log = logging.getLogger("yardstick_mlflow")

STOP_TAG = "yardstick.stop_requested"
DEFAULT_CHECK_S = 10.0

_checked_at = {}  # run id -> time.monotonic() of the last request
_stopped = set()  # run ids Yardstick said to stop


def check_interval_s():
    raw = os.environ.get("YARDSTICK_STOP_CHECK_S", "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_CHECK_S
    except ValueError:
        log.warning("YARDSTICK_STOP_CHECK_S=%r is not a number of seconds; using %s", raw, DEFAULT_CHECK_S)
        return DEFAULT_CHECK_S


def _active_run_id():
    run = mlflow.active_run()
    return run.info.run_id if run is not None else None


def should_stop(run_id=None):
    """True once Yardstick says the run (default: the active MLflow run) is to stop.

    False when there is no run, between checks, and when Yardstick cannot be asked.
    """
    run_id = run_id or _active_run_id()
    if run_id is None:
        return False
    if run_id in _stopped:
        return True
    now = time.monotonic()
    last = _checked_at.get(run_id)
    if last is not None and now - last < check_interval_s():
        return False
    _checked_at[run_id] = now
    try:
        tags = MlflowClient().get_run(run_id).data.tags
    except Exception as exc:  # noqa: BLE001 - the tracking server is away or refused: keep training
        log.warning("could not ask Yardstick whether run %s is to stop: %s", run_id, exc)
        return False
    if tags.get(STOP_TAG, "").lower() == "true":
        _stopped.add(run_id)
        log.info("Yardstick asked run %s to stop", run_id)
        return True
    return False


def end_killed(run_id=None):
    """End the run (default: the active one) with status KILLED, the way a stopped run ends.

    The active run ends through `mlflow.end_run`, so this process forgets it;
    a run already ended here (by a framework's own end of training) is set
    KILLED through the client.
    """
    active = _active_run_id()
    run_id = run_id or active
    if run_id is None:
        return
    if run_id == active:
        mlflow.end_run(status="KILLED")
    else:
        MlflowClient().set_terminated(run_id, status="KILLED")

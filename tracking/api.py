"""The MLflow tracking REST API, as the official client (mlflow-skinny 3.17) calls it.

Thin views: each parses MLflow's request (GET query parameters or a POST JSON
body, int64s as numbers or strings), calls tracking/store.py, and answers
MLflow's response shape. Errors answer `{"error_code", "message"}` with
MLflow's HTTP statuses. Reading needs any role (viewer and up); writing needs
reporter, operator or admin (yardstick.auth.TRACKING_WRITERS).
"""

import base64
import functools
import json
import math

from django.db.models import prefetch_related_objects
from django.http import HttpResponse

from tracking import protocol, search, store
from tracking.models import Stage, TrackingError, invalid
from yardstick.auth import TRACKING_WRITERS, role_of
from yardstick.inputs import InputError, NotJson, json_object

DEFAULT_MAX_RESULTS = 1000
MAX_RESULTS_LIMIT = 50000


def respond(data, status=200):
    return HttpResponse(json.dumps(_json_safe(data)), status=status, content_type="application/json")


def _json_safe(value):
    """NaN and infinities as MLflow's JSON spells them ("NaN", "Infinity"): plain JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def endpoint(name, methods, write=False):
    """The MLflow endpoint `name` answering `methods`: its request read as MLflow's server reads it
    (tracking/protocol.py), its errors in MLflow's shape."""

    def decorate(fn):
        @functools.wraps(fn)
        def view(request):
            try:
                if request.method not in methods:
                    raise TrackingError("ENDPOINT_NOT_FOUND", f"{request.method} is not served at {request.path}; "
                                                              f"it answers {' and '.join(methods)}")
                check_role(request, write)
                body = protocol.parse(name, _request_json(request, name))
                if write:
                    check_scope(request, _run_id(body) if isinstance(body, dict) else None)
                return respond(fn(request, body) or {})
            except TrackingError as err:
                return respond(err.to_dict(), status=err.status)

        return view

    return decorate


def check_role(request, write):
    """Raise the TrackingError MLflow's client reads (UNAUTHENTICATED, PERMISSION_DENIED) unless the caller is
    signed in and may read runs (any role) or, with `write`, write them (reporter, operator, admin)."""
    role = role_of(request.user)
    if not request.user.is_authenticated:
        raise TrackingError("UNAUTHENTICATED", "send an API token: MLFLOW_TRACKING_TOKEN=ys_...")
    if write and role not in TRACKING_WRITERS:
        raise TrackingError("PERMISSION_DENIED", f"writing runs needs the reporter, operator or admin role; "
                                                 f"{request.user.username} holds {role or 'no role'}")
    if role is None:
        raise TrackingError("PERMISSION_DENIED", f"{request.user.username} holds no role")


def check_scope(request, run_id):
    """Raise PERMISSION_DENIED when the caller's token writes one run only (a launched job's) and this write is
    not to that run: creating runs or experiments, another run, or a write that names no run."""
    scope = getattr(request, "token_run_id", "")
    if scope and run_id != scope:
        raise TrackingError("PERMISSION_DENIED", f"this token belongs to a launched job and writes its run {scope} "
                                                 f"only; this request writes {f'run {run_id}' if run_id else 'no run'}")


def _request_json(request, name):
    """The request's fields as JSON: a GET query as MLflow reads it, else the JSON body ({} when empty)."""
    if request.method == "GET":
        return protocol.query_json(protocol.ENDPOINTS[name][0], request.GET)
    if not request.body:
        return {}
    try:
        return json_object(request.body)
    except NotJson as err:
        raise TrackingError("MALFORMED_REQUEST", f"the request body is not JSON: {err.message}") from None
    except InputError as err:  # JSON that is refused: not an object, too deep, text that cannot be stored
        raise invalid(err.message) from None


def _run_id(body):
    return body.get("run_id") or body.get("run_uuid")


def _page(rows, body, default=DEFAULT_MAX_RESULTS):
    limit, offset = _max_results(body, default), _offset(body.get("page_token"))
    page = list(rows[offset:offset + limit + 1])
    token = base64.b64encode(json.dumps({"offset": offset + limit}).encode()).decode() if len(page) > limit else None
    return page[:limit], token


def _max_results(body, default):
    """An absent max_results is `default` (MLflow's clients always send one; its server reads an absent one as 0)."""
    value = body.get("max_results")
    if value is None:
        return default
    if not 1 <= value <= MAX_RESULTS_LIMIT:
        raise invalid(f"Invalid value {value} for parameter 'max_results' supplied. It must be a positive integer "
                      f"at most {MAX_RESULTS_LIMIT}.")
    return value


def _offset(token):
    """page_token: an opaque base64 of the offset (what this server handed out as next_page_token)."""
    if not token:
        return 0
    try:
        offset = json.loads(base64.b64decode(str(token).encode()).decode())["offset"]
        if isinstance(offset, int) and offset >= 0:
            return offset
    except (ValueError, KeyError, TypeError):
        pass
    raise invalid(f"Invalid page token {token!r}: pass the next_page_token of the previous answer")


# -- shapes -------------------------------------------------------------------------------


def run_info(run):
    return {"run_id": run.run_id, "run_uuid": run.run_id, "run_name": run.run_name,
            "experiment_id": str(run.experiment_id), "user_id": run.user_id, "status": run.status,
            "start_time": run.start_time, **({"end_time": run.end_time} if run.end_time is not None else {}),
            "artifact_uri": run.artifact_uri, "lifecycle_stage": run.lifecycle_stage}


# What run_dict reads of each run beyond its row.
RUN_PARTS = ("tags", "params", "dataset_inputs", "model_inputs")


def run_dict(run, latest=None, outputs=True):
    """MLflow's Run: info, data (latest metrics, params, tags), inputs and (read back, not when created)
    outputs, which are always empty here: runs log no models. As in MLflow's JSON, an empty list is left out."""
    latest = store.latest_metrics([run]).get(run.pk, []) if latest is None else latest
    # .all() and a sort here, not order_by: a search prefetched them for its whole page (search_runs).
    tags = [{"key": t.key, "value": t.value} for t in sorted(run.tags.all(), key=lambda t: t.key)]
    if run.job.stop_requested or run.job.budget_stop_requested or run.job.status == "stopping":
        # Computed, never stored: the client package reads it to stop training at the next step.
        tags.append({"key": store.STOP_TAG, "value": "true"})
    data = {"metrics": [_metric_dict(m) for m in latest],
            "params": [{"key": p.key, "value": p.value} for p in sorted(run.params.all(), key=lambda p: p.key)],
            "tags": tags}
    return {"info": run_info(run), "data": {k: v for k, v in data.items() if v}, "inputs": store.run_inputs(run),
            **({"outputs": {}} if outputs else {})}


def _metric_dict(metric):
    return {"key": metric.key, "value": metric.value, "timestamp": metric.timestamp, "step": metric.step}


# -- experiments --------------------------------------------------------------------------


@endpoint("experiments/create", ("POST",), write=True)
def create_experiment(request, body):
    experiment = store.create_experiment(body.field("name"), body.field("artifact_location"), body.field("tags"))
    return {"experiment_id": experiment.experiment_id}


@endpoint("experiments/get", ("GET",))
def get_experiment(request, body):
    return {"experiment": store.get_experiment(body.field("experiment_id")).to_mlflow()}


@endpoint("experiments/get-by-name", ("GET",))
def get_experiment_by_name(request, body):
    return {"experiment": store.get_experiment_by_name(body.field("experiment_name")).to_mlflow()}


@endpoint("experiments/search", ("GET", "POST"))
def search_experiments(request, body):
    rows = search.experiments(body.field("filter"), body.field("order_by"), body.get("view_type"))
    page, token = _page(rows, body)
    return {**({"experiments": [e.to_mlflow() for e in page]} if page else {}),
            **({"next_page_token": token} if token else {})}


@endpoint("experiments/update", ("POST",), write=True)
def update_experiment(request, body):
    store.rename_experiment(body.field("experiment_id"), body.field("new_name"))


@endpoint("experiments/delete", ("POST",), write=True)
def delete_experiment(request, body):
    store.set_experiment_stage(body.field("experiment_id"), Stage.DELETED)


@endpoint("experiments/restore", ("POST",), write=True)
def restore_experiment(request, body):
    store.set_experiment_stage(body.field("experiment_id"), Stage.ACTIVE)


@endpoint("experiments/set-experiment-tag", ("POST",), write=True)
def set_experiment_tag(request, body):
    store.set_experiment_tag(body.field("experiment_id"), body.field("key"), body.field("value"))


@endpoint("experiments/delete-experiment-tag", ("POST",), write=True)
def delete_experiment_tag(request, body):
    store.delete_experiment_tag(body.field("experiment_id"), body.field("key"))


# -- runs ----------------------------------------------------------------------------------


@endpoint("runs/create", ("POST",), write=True)
def create_run(request, body):
    # Deliberately not MLflow's: a run sent without a user or a start time is the token's user's, started now.
    run = store.create_run(body.field("experiment_id"), body.field("user_id") or request.user.username,
                           body.get("start_time"), body.field("tags"), body.field("run_name"),
                           created_by=request.user)
    return {"run": run_dict(run, latest=[], outputs=False)}


@endpoint("runs/get", ("GET",))
def get_run(request, body):
    return {"run": run_dict(store.get_run(_run_id(body)))}


@endpoint("runs/update", ("POST",), write=True)
def update_run(request, body):
    run = store.update_run(_run_id(body), body.get("status"), body.get("end_time"), body.get("run_name"))
    return {"run_info": run_info(run)}


@endpoint("runs/delete", ("POST",), write=True)
def delete_run(request, body):
    store.set_run_stage(body.field("run_id"), Stage.DELETED)


@endpoint("runs/restore", ("POST",), write=True)
def restore_run(request, body):
    store.set_run_stage(body.field("run_id"), Stage.ACTIVE)


@endpoint("runs/search", ("POST",))
def search_runs(request, body):
    rows = search.runs(body.field("experiment_ids"), body.field("filter"), body.field("order_by"),
                       body.get("run_view_type"))
    page, token = _page(rows, body)
    prefetch_related_objects(page, *RUN_PARTS)  # a query per part for the page, not per run
    latest = store.latest_metrics(page)
    return {**({"runs": [run_dict(r, latest.get(r.pk, [])) for r in page]} if page else {}),
            **({"next_page_token": token} if token else {})}


@endpoint("runs/log-batch", ("POST",), write=True)
def log_batch(request, body):
    store.log_batch(body.field("run_id"), body.field("metrics"), body.field("params"), body.field("tags"))


@endpoint("runs/log-metric", ("POST",), write=True)
def log_metric(request, body):
    store.log_batch(_run_id(body), metrics=[{k: body.field(k) for k in ("key", "value", "timestamp", "step")}],
                    single=True)


@endpoint("runs/log-parameter", ("POST",), write=True)
def log_param(request, body):
    store.log_batch(_run_id(body), params=[{"key": body.field("key"), "value": body.field("value")}], single=True)


@endpoint("runs/set-tag", ("POST",), write=True)
def set_tag(request, body):
    store.log_batch(_run_id(body), tags=[{"key": body.field("key"), "value": body.field("value")}], single=True)


@endpoint("runs/delete-tag", ("POST",), write=True)
def delete_tag(request, body):
    store.delete_tag(body.field("run_id"), body.field("key"))


@endpoint("runs/log-inputs", ("POST",), write=True)
def log_inputs(request, body):
    """Datasets (and logged models) a run used, shown back in its `inputs` as MLflow does."""
    store.log_inputs(body.field("run_id"), body.field("datasets"), body.field("models"))


@endpoint("metrics/get-history", ("GET",))
def get_metric_history(request, body):
    rows = store.metric_history(_run_id(body), body.field("metric_key"))
    page, token = _page(rows, body, default=MAX_RESULTS_LIMIT * 10)
    return {**({"metrics": [_metric_dict(m) for m in page]} if page else {}),
            **({"next_page_token": token} if token else {})}


@endpoint("logged-models/search", ("POST",))
def search_logged_models(request, body):
    """Runs here log no models; MLflow 3's client searches a run's models whenever it lists or downloads
    the run's artifacts (log_table, download_artifacts), and an error there would end those calls."""
    return {"models": []}


def endpoint_not_found(request):
    """Any other path under MLflow's API prefixes: MLflow's JSON 404, which its clients know how to handle."""
    err = TrackingError("ENDPOINT_NOT_FOUND", f"{request.method} {request.path} is not served by Yardstick's "
                                              "MLflow-compatible tracking API")
    return respond(err.to_dict(), status=err.status)

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

from django.http import HttpResponse

from tracking import search, store
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


def endpoint(methods, write=False):
    """An MLflow endpoint answering `methods`, its body parsed into a dict, its errors in MLflow's shape."""

    def decorate(fn):
        @functools.wraps(fn)
        def view(request):
            try:
                if request.method not in methods:
                    raise TrackingError("ENDPOINT_NOT_FOUND", f"{request.method} is not served at {request.path}; "
                                                              f"it answers {' and '.join(methods)}")
                _check_role(request, write)
                return respond(fn(request, _body(request)) or {})
            except TrackingError as err:
                return respond(err.to_dict(), status=err.status)

        return view

    return decorate


def _check_role(request, write):
    role = role_of(request.user)
    if not request.user.is_authenticated:
        raise TrackingError("UNAUTHENTICATED", "send an API token: MLFLOW_TRACKING_TOKEN=ys_...")
    if write and role not in TRACKING_WRITERS:
        raise TrackingError("PERMISSION_DENIED", f"writing runs needs the reporter, operator or admin role; "
                                                 f"{request.user.username} holds {role or 'no role'}")
    if role is None:
        raise TrackingError("PERMISSION_DENIED", f"{request.user.username} holds no role")


# Fields MLflow's protos declare as one string or number: a list or object there reached code that hashes
# or compares it (a 500). Repeated fields (experiment_ids, order_by, tags, metrics, ...) are not here.
SINGLE_VALUED = ("run_id", "run_uuid", "experiment_id", "experiment_name", "name", "new_name", "key", "value",
                 "view_type", "run_view_type", "filter", "status", "run_name", "user_id", "start_time", "end_time",
                 "timestamp", "step", "metric_key", "max_results", "page_token", "artifact_location")


def _body(request):
    if request.method == "GET":
        body = {k: (v if len(v) > 1 else v[0]) for k, v in request.GET.lists()}
    elif not request.body:
        return {}
    else:
        try:
            body = json_object(request.body)
        except NotJson as err:
            raise TrackingError("MALFORMED_REQUEST", f"the request body is not JSON: {err.message}") from None
        except InputError as err:  # JSON that is refused: not an object, too deep, text that cannot be stored
            raise invalid(err.message) from None
    for name in SINGLE_VALUED:
        if isinstance(body.get(name), (list, dict)):
            raise invalid(f"Invalid value (a {type(body[name]).__name__}) for parameter '{name}' supplied. It must "
                          f"be a single string or number, given once.")
    return body


def _run_id(body):
    return body.get("run_id") or body.get("run_uuid")


def _max_results(body, default=DEFAULT_MAX_RESULTS):
    value = body.get("max_results")
    if value in (None, ""):
        return default
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_RESULTS_LIMIT:
        raise invalid(f"Invalid value {value!r} for parameter 'max_results' supplied. It must be an integer from "
                      f"1 to {MAX_RESULTS_LIMIT}.")
    return int(text)


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


def _page(rows, body, default=DEFAULT_MAX_RESULTS):
    limit, offset = _max_results(body, default), _offset(body.get("page_token"))
    page = list(rows[offset:offset + limit + 1])
    token = base64.b64encode(json.dumps({"offset": offset + limit}).encode()).decode() if len(page) > limit else None
    return page[:limit], token


def _list(value):
    if value in (None, ""):
        return []
    return value if isinstance(value, list) else [value]


# -- shapes -------------------------------------------------------------------------------


def run_info(run):
    return {"run_id": run.run_id, "run_uuid": run.run_id, "run_name": run.run_name,
            "experiment_id": str(run.experiment_id), "user_id": run.user_id, "status": run.status,
            "start_time": run.start_time, **({"end_time": run.end_time} if run.end_time is not None else {}),
            "artifact_uri": run.artifact_uri, "lifecycle_stage": run.lifecycle_stage}


def run_dict(run, latest=None):
    """MLflow's Run: info, data (latest metrics, params, tags) and inputs."""
    latest = store.latest_metrics([run]).get(run.pk, []) if latest is None else latest
    tags = [{"key": t.key, "value": t.value} for t in run.tags.order_by("key")]
    if run.job.stop_requested or run.job.status == "stopping":
        # Computed, never stored: the client package reads it to stop training at the next step.
        tags.append({"key": store.STOP_TAG, "value": "true"})
    return {
        "info": run_info(run),
        "data": {
            "metrics": [{"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step} for m in latest],
            "params": [{"key": p.key, "value": p.value} for p in run.params.order_by("key")],
            "tags": tags,
        },
        "inputs": {},
    }


# -- experiments --------------------------------------------------------------------------


@endpoint(("POST",), write=True)
def create_experiment(request, body):
    experiment = store.create_experiment(body.get("name"), body.get("artifact_location") or "", body.get("tags"))
    return {"experiment_id": experiment.experiment_id}


@endpoint(("GET",))
def get_experiment(request, body):
    return {"experiment": store.get_experiment(body.get("experiment_id")).to_mlflow()}


@endpoint(("GET",))
def get_experiment_by_name(request, body):
    return {"experiment": store.get_experiment_by_name(body.get("experiment_name")).to_mlflow()}


@endpoint(("GET", "POST"))
def search_experiments(request, body):
    rows = search.experiments(body.get("filter") or "", _list(body.get("order_by")), body.get("view_type"))
    page, token = _page(rows, body)
    return {"experiments": [e.to_mlflow() for e in page], **({"next_page_token": token} if token else {})}


@endpoint(("POST",), write=True)
def update_experiment(request, body):
    store.rename_experiment(body.get("experiment_id"), body.get("new_name"))


@endpoint(("POST",), write=True)
def delete_experiment(request, body):
    store.set_experiment_stage(body.get("experiment_id"), Stage.DELETED)


@endpoint(("POST",), write=True)
def restore_experiment(request, body):
    store.set_experiment_stage(body.get("experiment_id"), Stage.ACTIVE)


@endpoint(("POST",), write=True)
def set_experiment_tag(request, body):
    store.set_experiment_tag(body.get("experiment_id"), body.get("key"), body.get("value"))


@endpoint(("POST",), write=True)
def delete_experiment_tag(request, body):
    store.delete_experiment_tag(body.get("experiment_id"), body.get("key"))


# -- runs ----------------------------------------------------------------------------------


@endpoint(("POST",), write=True)
def create_run(request, body):
    run = store.create_run(body.get("experiment_id"), body.get("user_id") or request.user.username,
                           body.get("start_time"), body.get("tags"), body.get("run_name") or "",
                           created_by=request.user)
    return {"run": run_dict(run, latest=[])}


@endpoint(("GET",))
def get_run(request, body):
    return {"run": run_dict(store.get_run(_run_id(body)))}


@endpoint(("POST",), write=True)
def update_run(request, body):
    run = store.update_run(_run_id(body), body.get("status"), body.get("end_time"), body.get("run_name"))
    return {"run_info": run_info(run)}


@endpoint(("POST",), write=True)
def delete_run(request, body):
    store.set_run_stage(_run_id(body), Stage.DELETED)


@endpoint(("POST",), write=True)
def restore_run(request, body):
    store.set_run_stage(_run_id(body), Stage.ACTIVE)


@endpoint(("POST",))
def search_runs(request, body):
    rows = search.runs(_list(body.get("experiment_ids")), body.get("filter") or "", _list(body.get("order_by")),
                       body.get("run_view_type"))
    page, token = _page(rows, body)
    latest = store.latest_metrics(page)
    return {"runs": [run_dict(r, latest.get(r.pk, [])) for r in page], **({"next_page_token": token} if token else {})}


@endpoint(("POST",), write=True)
def log_batch(request, body):
    store.log_batch(_run_id(body), body.get("metrics"), body.get("params"), body.get("tags"))


@endpoint(("POST",), write=True)
def log_metric(request, body):
    store.log_batch(_run_id(body), metrics=[{k: body.get(k) for k in ("key", "value", "timestamp", "step")
                                             if k in body}])


@endpoint(("POST",), write=True)
def log_param(request, body):
    store.log_batch(_run_id(body), params=[{"key": body.get("key"), "value": body.get("value")}])


@endpoint(("POST",), write=True)
def set_tag(request, body):
    store.log_batch(_run_id(body), tags=[{"key": body.get("key"), "value": body.get("value")}])


@endpoint(("POST",), write=True)
def delete_tag(request, body):
    store.delete_tag(_run_id(body), body.get("key"))


@endpoint(("POST",), write=True)
def log_inputs(request, body):
    """Datasets and models a run used: accepted and not kept (nothing here reads them), so a client that
    logs them (MLflow 3 does when a metric names a model or dataset) goes on."""
    store.get_run(_run_id(body))


@endpoint(("GET",))
def get_metric_history(request, body):
    rows = store.metric_history(_run_id(body), body.get("metric_key"))
    page, token = _page(rows, body, default=MAX_RESULTS_LIMIT * 10)
    return {"metrics": [{"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step} for m in page],
            **({"next_page_token": token} if token else {})}


@endpoint(("POST",))
def search_logged_models(request, body):
    """Runs here log no models; MLflow 3's client searches a run's models whenever it lists or downloads
    the run's artifacts (log_table, download_artifacts), and an error there would end those calls."""
    return {"models": []}


def endpoint_not_found(request):
    """Any other path under MLflow's API prefixes: MLflow's JSON 404, which its clients know how to handle."""
    err = TrackingError("ENDPOINT_NOT_FOUND", f"{request.method} {request.path} is not served by Yardstick's "
                                              "MLflow-compatible tracking API")
    return respond(err.to_dict(), status=err.status)

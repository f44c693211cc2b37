"""MLflow's proxied artifact API, as its client calls it for `mlflow-artifacts:` URIs (tracking/artifacts.py
keeps the files and says what they mean).

PUT  /api/2.0/mlflow-artifacts/artifacts/<exp>/<run>/artifacts/<path>  upload one file (the body is the bytes)
GET  /api/2.0/mlflow-artifacts/artifacts/<exp>/<run>/artifacts/<path>  download it
GET  /api/2.0/mlflow-artifacts/artifacts?path=<exp>/<run>/artifacts[/<dir>]  list a folder: {"files": [...]}

Anything else under /api/2.0/mlflow-artifacts/ (multipart uploads, presigned URLs, deletes) answers
MLflow's ENDPOINT_NOT_FOUND: the client then takes the plain path above.
"""

from django.http import FileResponse, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from tracking import artifacts
from tracking.api import check_role, check_scope
from tracking.artifacts import ArtifactError
from tracking.models import TrackingError


def _error(err):
    return JsonResponse(err.to_dict(), status=err.status)


def _refusal(request, write):
    """None when the caller may read (any role) or write (reporter, operator, admin) runs; else MLflow's error
    (the tracking API's own rule, tracking.api.check_role)."""
    try:
        check_role(request, write)
    except TrackingError as err:
        return err
    return None


@csrf_exempt
def artifact(request, path):
    """Upload (PUT) or download (GET) one artifact."""
    if request.method not in ("GET", "PUT"):
        return not_found(request)
    denied = _refusal(request, write=request.method == "PUT")
    if denied:
        return _error(denied)
    try:
        run, rel = artifacts.locate(path)
        if request.method == "PUT":
            check_scope(request, run.run_id)
        if request.method == "GET":
            found, stored = artifacts.file_path(run, rel)
            resp = FileResponse(open(stored, "rb"), content_type=found.content_type, filename=stored.name)
            # A run's files are its author's content on our origin: an SVG or HTML opened here runs no script.
            resp["Content-Security-Policy"] = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
            resp["X-Content-Type-Options"] = "nosniff"
            return resp
        length = request.headers.get("Content-Length")
        artifacts.save(run, rel, request, content_type=request.headers.get("Content-Type", ""),
                       declared_bytes=int(length) if length and length.isdigit() else None)
    except TrackingError as err:  # ArtifactError is one
        return _error(err)
    return HttpResponse(b"")  # MLflow's server answers an upload with an empty 200


def listing(request):
    """List a run's artifact folder (`?path=`), in MLflow's shape: {"files": [{path, is_dir, file_size}]},
    `{}` when empty (MLflow's server omits an empty list too)."""
    if request.method != "GET":
        return not_found(request)
    denied = _refusal(request, write=False)
    if denied:
        return _error(denied)
    try:
        run, rel = artifacts.locate(request.GET.get("path", ""), field="path")
        files = artifacts.listing(run, rel)
    except ArtifactError as err:
        return _error(err)
    return JsonResponse({"files": files} if files else {})


@csrf_exempt
def not_found(request, rest=""):
    return JsonResponse({"error_code": "ENDPOINT_NOT_FOUND",
                         "message": f"{request.method} {request.path} is not served here: artifacts are uploaded "
                                    "with PUT, read with GET, listed with GET ...artifacts?path="}, status=404)

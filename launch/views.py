"""The recipes and launch JSON API: viewers read recipes and a launched job's output; only admins create, change
and import recipes (a recipe runs code on GPU nodes); operators launch them. Errors are {"error", "field"} (400),
404 for an unknown recipe or job, 403 for a role that may not.
"""

import json

import yaml
from django.conf import settings
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

from launch import kind, remote
from launch.executors import executor_named
from launch.models import Cluster, Launch, OutputLine, Recipe, export_all, import_all
from launch.output import marker
from trainer.models import Job
from yardstick.auth import require_role
from yardstick.http import bad, int_param, methods
from yardstick.inputs import InputError, json_object

LAUNCH_FIELDS = ("recipe", "params", "name", "team", "env", "budget_usd", "node", "pool", "init_from", "init_step",
                 "stop_loss", "cluster", "priority")
OUTPUT_LIMIT, OUTPUT_LIMIT_MAX = 1000, 10000

FORMATS = ("json", "yaml")


def _missing(name):
    return JsonResponse({"error": f"no recipe {name!r}"}, status=404)


def _format(request):
    fmt = request.GET.get("format", "json")
    if fmt not in FORMATS:
        raise InputError("format", f"format must be json or yaml, got {fmt!r}")
    return fmt


# -- /api/recipes ---------------------------------------------------------------------------------


@require_role("viewer")
def _list(request):
    return JsonResponse({"recipes": [r.to_dict() for r in Recipe.objects.all()]})


@require_role("admin")
def _create(request):
    try:
        body = json_object(request.body)
        if Recipe.objects.filter(name=body.get("name")).exists():
            raise InputError("name", f"a recipe {body.get('name')!r} exists: PUT /api/recipes/<name> changes it")
        recipe, _ = Recipe.define(body.get("name"), body, request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(recipe.to_dict(versions=True), status=201)


recipes_api = methods(GET=_list, POST=_create)


# -- /api/recipes/<name> --------------------------------------------------------------------------


@require_role("viewer")
def _get(request, name):
    recipe = Recipe.objects.filter(name=name).first()
    return _missing(name) if recipe is None else JsonResponse(recipe.to_dict(versions=True))


@require_role("admin")
def _put(request, name):
    """A new version of the recipe when the body differs from its current one (the whole definition)."""
    if not Recipe.objects.filter(name=name).exists():
        return _missing(name)
    try:
        body = json_object(request.body)
        if body.get("name", name) != name:
            raise InputError("name", f"name cannot change ({name!r} in the URL, {body.get('name')!r} in the body)")
        recipe, _ = Recipe.define(name, {k: v for k, v in body.items() if k != "name"}, request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(recipe.to_dict(versions=True))


recipe_api = methods(GET=_get, PUT=_put)


# -- /api/recipes/export, /api/recipes/import -----------------------------------------------------


@require_role("viewer")
def _export(request):
    """Every recipe, ?format=json (default) or yaml, as a file to keep in git."""
    try:
        fmt = _format(request)
    except InputError as err:
        return bad(err.field, err.message)
    document = export_all()
    if fmt == "yaml":
        text, kind = yaml.safe_dump(document, sort_keys=False, allow_unicode=True), "application/yaml"
    else:
        text, kind = json.dumps(document, indent=2) + "\n", "application/json"
    response = HttpResponse(text, content_type=f"{kind}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="yardstick-recipes.{fmt}"'
    return response


def _document(request, fmt):
    if fmt == "json":
        return json_object(request.body)
    try:
        document = yaml.safe_load(request.body.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise InputError("body", f"the body must be YAML in UTF-8 ({str(err).splitlines()[0]})") from None
    # Through JSON, so what YAML alone can say (dates, sets, binary) is refused as text would be.
    return json_object(json.dumps(document, default=lambda v: f"<{type(v).__name__} {v!r}>").encode())


@require_role("admin")
def _import(request):
    """Define every recipe of the body (?format=json or yaml, as export gives it), all or none."""
    try:
        return JsonResponse(import_all(_document(request, _format(request)), request.user))
    except InputError as err:
        return bad(err.field, err.message)


export_api = methods(GET=_export)
import_api = methods(POST=_import)


# -- /api/clusters -------------------------------------------------------------------------------


def cluster_detail(cluster, nodes=False):
    """A cluster as the API and its page show it; with `nodes`, its nodes as it reports them (asked now), each tied to
    its Yardstick node or flagged as one whose cost cannot be measured, and {"nodes_error"} when it did not answer."""
    out = {**cluster.to_dict(), "live_jobs": cluster.live_jobs()}
    if nodes:
        try:
            found = remote.tie(executor_named(cluster.kind).nodes(cluster))
        except remote.Unreachable as err:
            out.update(nodes=[], nodes_error=f"the cluster did not answer: {err}")
        else:
            out["nodes"] = [{"name": n.name, "address": n.address, "alive": n.alive, "head": n.head, "gpus": n.gpus,
                             "cpus": n.cpus, "yardstick_node": n.yardstick_node,
                             "measured": n.yardstick_node is not None} for n in found]
    return out


@require_role("viewer")
def _clusters(request):
    return JsonResponse({"clusters": [cluster_detail(c) for c in Cluster.objects.all()]})


@require_role("admin")
def _register(request):
    """Register a cluster {name, address, kind, headers, python, description} (or change the one of that name)."""
    try:
        cluster, outcome = Cluster.register(json_object(request.body), request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(cluster_detail(cluster), status=201 if outcome == "created" else 200)


clusters_api = methods(GET=_clusters, POST=_register)


@require_role("viewer")
def _cluster(request, name):
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        return JsonResponse({"error": f"no cluster {name!r}"}, status=404)
    return JsonResponse(cluster_detail(cluster, nodes=True))


@require_role("admin")
def _unregister(request, name):
    """Forget a cluster (launch.remote.forget): refused while a job launched on it is live and it answers (its
    follower needs the address); one that does not answer is forgotten with its live jobs, which end ("ended")."""
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        return JsonResponse({"error": f"no cluster {name!r}"}, status=404)
    forgotten, live, ended = remote.forget(cluster, by=request.user)
    if not forgotten:
        return bad("name", f"cluster {name!r} runs job(s) {', '.join(map(str, live))}: stop them first")
    return JsonResponse({"deleted": name, "ended": ended})


cluster_api = methods(GET=_cluster, DELETE=_unregister)


# -- /api/launch ----------------------------------------------------------------------------------


@require_role("operator")
def _launch(request):
    """Launch a recipe: {recipe, params: {name: value}, name, team, env, budget_usd, node, pool, init_from,
    init_step, stop_loss, cluster, priority}; 201 with the job, which waits in the line while its devices are
    busy. A value its parameter refuses, or devices no live launch worker could ever give, is a 400 naming the
    field."""
    try:
        body = json_object(request.body)
        unknown = sorted(set(body) - set(LAUNCH_FIELDS))
        if unknown:
            raise InputError(unknown[0], f"unknown field {unknown[0]!r}; accepted fields are {', '.join(LAUNCH_FIELDS)}")
        job = kind.start(**{k: body[k] for k in LAUNCH_FIELDS if k in body}, created_by=request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse({**job.to_dict(detail=True), "launch": job.launch.to_dict()}, status=201)


launch_api = methods(POST=_launch)


@require_role("operator")
def _restart(request, job_id):
    """A new job of a launched job's recipe and values (for one that cannot resume); 201 with it."""
    job = Job.objects.filter(pk=job_id, launch__isnull=False).first()
    if job is None:
        return JsonResponse({"error": f"no launched job {job_id}"}, status=404)
    try:
        new = kind.restart(job, by=request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse({**new.to_dict(detail=True), "launch": new.launch.to_dict()}, status=201)


restart_api = methods(POST=_restart)


# -- /api/jobs/<id>/output ------------------------------------------------------------------------


def _launch_of(job_id):
    return Launch.objects.filter(pk=job_id).first()


@require_role("viewer")
def _output(request, job_id):
    """A launched job's output lines: ?after=<seq> (the lines after it, oldest first), ?before=<seq> (the newest
    before it), ?limit=, ?q= (lines containing it, any case), ?stream=stdout|stderr|yardstick. With neither after
    nor before: the newest `limit`. {"lines": [[seq, stream, text]], "last": newest seq, "marker", "dropped"}."""
    launch = _launch_of(job_id)
    if launch is None:
        return JsonResponse({"error": f"no launched job {job_id}"}, status=404)
    try:
        after = int_param(request, "after", None, 0)
        before = int_param(request, "before", None, 1)
        limit = int_param(request, "limit", OUTPUT_LIMIT, 1, OUTPUT_LIMIT_MAX)
        stream = request.GET.get("stream", "")
        if stream not in ("", "stdout", "stderr", "yardstick"):
            raise InputError("stream", f"stream must be stdout, stderr or yardstick, got {stream!r}")
        q = request.GET.get("q", "")
        if len(q) > 200:
            raise InputError("q", f"q must be at most 200 characters, got {len(q)}")
    except InputError as err:
        return bad(err.field, err.message)
    rows = OutputLine.objects.filter(job_id=job_id)
    if stream:
        rows = rows.filter(stream=stream)
    if q:
        rows = rows.filter(text__icontains=q)
    if after is not None:
        page = list(rows.filter(seq__gt=after).order_by("seq")[:limit])
    else:
        if before is not None:
            rows = rows.filter(seq__lt=before)
        page = list(rows.order_by("-seq")[:limit])[::-1]
    cap = settings.LAUNCH_OUTPUT_MAX_MB * 2**20
    return JsonResponse({"job": job_id, "lines": [line.to_list() for line in page], "last": launch.output_seq,
                         "dropped": launch.output_dropped, "marker": marker(launch.output_dropped, cap),
                         "bytes": launch.output_bytes})


@require_role("viewer")
def _output_text(request, job_id):
    """The whole output kept, as a text file (the marker first when lines were dropped)."""
    launch = _launch_of(job_id)
    if launch is None:
        return JsonResponse({"error": f"no launched job {job_id}"}, status=404)
    said = marker(launch.output_dropped, settings.LAUNCH_OUTPUT_MAX_MB * 2**20)

    def lines():
        if said:
            yield said + "\n"
        rows = OutputLine.objects.filter(job_id=job_id).order_by("seq").values_list("stream", "text")
        for stream, text in rows.iterator(chunk_size=2000):
            yield (f"[yardstick] {text}" if stream == "yardstick" else text) + "\n"

    response = StreamingHttpResponse(lines(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="job-{job_id}-output.txt"'
    return response


output_api = methods(GET=_output)
output_text = methods(GET=_output_text)

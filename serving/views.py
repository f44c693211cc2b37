"""The Serving page and /api/serving: viewers read the deployments; only admins register, change or delete one
(an operator may not: a deployment's GPUs are the team's bill). API errors are `{"error": message, "field": ...}`."""

from urllib.parse import urlencode

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from collector.agent.engines import ENGINES
from collector.models import ServedCount
from serving.models import AUTO, FIELDS, Deployment
from yardstick.auth import require_role
from yardstick.http import bad, methods
from yardstick.inputs import InputError, json_object


def _missing(name):
    return JsonResponse({"error": f"no deployment {name!r}"}, status=404)


@require_role("viewer")
def _list(request):
    rows = list(Deployment.objects.select_related("created_by", "target"))
    counted = ServedCount.totals([d.target_id for d in rows])
    return JsonResponse({"deployments": [d.to_dict(counted) for d in rows]})


@require_role("admin")
def _register(request):
    """{name, team, engine, metrics_url, model, node, description}: 201 when created, 200 when changed."""
    try:
        row, outcome = Deployment.register(json_object(request.body), request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse({**row.to_dict(), "outcome": outcome}, status=201 if outcome == "created" else 200)


@require_role("viewer")
def _detail(request, name):
    row = Deployment.objects.filter(name=name).first()
    return _missing(name) if row is None else JsonResponse(row.to_dict(ServedCount.totals([row.target_id])))


@require_role("admin")
def _delete(request, name):
    row = Deployment.objects.filter(name=name).first()
    if row is None:
        return _missing(name)
    row.delete()
    return JsonResponse({"deleted": name})


serving_api = methods(GET=_list, POST=_register)
deployment_api = methods(GET=_detail, DELETE=_delete)


@require_GET
@require_role("viewer")
def serving_page(request):
    prefill = {k: request.GET.get(k, "")[:2000] for k in FIELDS}
    rows = list(Deployment.objects.select_related("created_by", "target"))
    counted = ServedCount.totals([d.target_id for d in rows])
    for row in rows:
        row.counted = counted.get(row.target_id, ServedCount.empty())
    return render(request, "serving/serving.html", {
        "deployments": rows, "engines": ENGINES, "auto": AUTO,
        "prefill": prefill, "prefilled": any(prefill.values())})


@require_POST
@require_role("admin")
def register_deployment(request):
    raw = {k: request.POST.get(k, "") for k in FIELDS}
    try:
        row, outcome = Deployment.register(raw, request.user)
    except InputError as err:
        messages.error(request, f"Deployment not registered: {err.message}.")
        return redirect("/serving?" + urlencode({k: v[:2000] for k, v in raw.items() if v}) + "#register")
    messages.success(request, f"Deployment {row.name} {outcome}.")
    return redirect("serving")


@require_POST
@require_role("admin")
def delete_deployment(request, name):
    row = get_object_or_404(Deployment, name=name)
    row.delete()
    messages.success(request, f"Deployment {name} deleted.")
    return redirect("serving")

"""The recipes JSON API: viewers read recipes, only admins create, change and import them (a recipe runs code
on GPU nodes). Errors are {"error", "field"} (400), 404 for an unknown recipe, 403 for a role that may not.
"""

import json

import yaml
from django.http import HttpResponse, JsonResponse

from launch.models import Recipe, export_all, import_all
from yardstick.auth import require_role
from yardstick.http import bad, methods
from yardstick.inputs import InputError, json_object

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

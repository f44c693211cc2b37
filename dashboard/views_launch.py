"""The pages of launched jobs and recipes: /recipes (everyone reads; admins create, edit and import, each
change a new version through launch.models.Recipe.define), a launched job's Restart, and the parts of the job
pages a live page redraws from the server when a job's status changes (its controls, its launch card).

Small form views that call the same model methods as the JSON API (launch/views.py), so a page without
JavaScript still works and CSRF protects them.
"""

from django.contrib import messages
from django.db.models import Count
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from costs.intelligence import base_build
from dashboard import launched
from launch import kind
from launch.models import FIRST_RUN, Launch, Recipe, import_all, import_examples
from trainer.models import Job
from yardstick.auth import has_role, require_role
from yardstick.http import bad_page
from yardstick.inputs import InputError

IMPORT_MAX_BYTES = 2 * 2**20


def _format(value, default="yaml"):
    return value if value in launched.FORMATS else default


# -- /recipes ------------------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def recipes_page(request):
    """GET: the recipes, for everyone; POST (admins): create one from the YAML or JSON in the textarea,
    (action=import) define every recipe of an uploaded export, or (action=examples) the shipped examples."""
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "examples":
            return _examples(request)
        return _import(request) if action == "import" else _create(request)
    return _list(request)


@require_role("viewer")
def _list(request):
    return _list_page(request)


def _list_page(request, status=200, **form):
    recipes = list(Recipe.objects.annotate(launches_n=Count("launches")).order_by("name"))
    for r in recipes:
        r.devices_text = launched.devices_text(r.definition["devices"])
    example = launched.definition_text("my-recipe", {
        "description": "what it runs", "argv": ["{python}", "train.py", "--steps={steps}", "--out={job_dir}"],
        "params": [{"name": "steps", "kind": "integer", "default": 100, "minimum": 1, "maximum": 100000,
                    "help": "training steps"}],
        "devices": {"kind": "cuda", "count": 1}, "framework": "trl"})
    fmt = _format(form.get("fmt") or request.GET.get("format"))
    return render(request, "dashboard/recipes.html", {
        "recipes": recipes, "text": form.get("text", ""), "example": example, "fmt": fmt,
        "formats": launched.FORMATS, "error": form.get("error"), "import_error": form.get("import_error"),
        "can_edit": has_role(request.user, "admin"),
        "first_run": next((r.name for r in recipes if r.name == FIRST_RUN), None),
    }, status=status)


@require_POST
@require_role("admin")
def _create(request):
    text, fmt = request.POST.get("definition", ""), request.POST.get("format", "yaml")
    try:
        document = launched.parse_definition(text, fmt)
        name = document.get("name")
        if isinstance(name, str) and Recipe.objects.filter(name=name).exists():
            raise InputError("name", f"a recipe {name!r} exists: edit it on its own page")
        recipe, _ = Recipe.define(name, document, request.user)
    except InputError as err:
        return _list_page(request, status=400, text=text, fmt=_format(fmt), error=err)
    messages.success(request, f"Recipe {recipe.name} created: version 1.")
    return redirect("recipe", name=recipe.name)


@require_role("admin")
def _import(request):
    """Define every recipe of an uploaded export (YAML or JSON, by its name or the format picked): all or none."""
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise InputError("file", "choose a file: an export of /api/recipes/export (YAML or JSON)")
        if upload.size > IMPORT_MAX_BYTES:
            raise InputError("file", f"the file is {upload.size:,} bytes; at most {IMPORT_MAX_BYTES:,} are accepted")
        name = upload.name.lower()
        fmt = "json" if name.endswith(".json") else "yaml" if name.endswith((".yaml", ".yml")) else _format(
            request.POST.get("format"))
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("file", "the file must be text in UTF-8") from None
        outcome = import_all(launched.parse_definition(text, fmt), request.user)
    except InputError as err:
        return _list_page(request, status=400, import_error=err)
    said = "; ".join(f"{what} {', '.join(names)}" for what, names in outcome.items() if names) or "it held no recipe"
    messages.success(request, f"Imported {upload.name}: {said}.")
    return redirect("recipes")


@require_POST
@require_role("admin")
def _examples(request):
    """Define the example recipes shipped with Yardstick (launch/examples/recipes.yaml) in one click."""
    outcome = import_examples(request.user)
    said = "; ".join(f"{what} {', '.join(names)}" for what, names in outcome.items() if names)
    messages.success(request, f"Imported the example recipes: {said}. Edit their model roots, data paths and devices "
                              f"to your nodes; {FIRST_RUN} runs as it is, on this machine's CPU.")
    return redirect("recipes")


@require_http_methods(["GET", "POST"])
def recipe_page(request, name):
    """GET: one recipe, its versions (?version=N shows that one), its launches; POST (admins): a new version."""
    if request.method == "POST":
        return _edit(request, name)
    return _detail(request, name)


@require_role("viewer")
def _detail(request, name):
    return _detail_page(request, name)


def _detail_page(request, name, status=200, **form):
    recipe = get_object_or_404(Recipe, name=name)
    versions = list(recipe.versions.select_related("created_by").order_by("-version"))
    launches = dict(Launch.objects.filter(recipe_name=recipe.name).values_list("recipe_version").annotate(n=Count("pk")))
    for v in versions:
        v.launches_n = launches.get(v.version, 0)
    shown = recipe.version
    if request.GET.get("version"):
        try:
            shown = int(request.GET["version"])
        except ValueError:
            return bad_page(request, "version", f"version must be a version number, got {request.GET['version']!r}")
    version = next((v for v in versions if v.version == shown), None)
    if version is None:
        raise Http404(f"recipe {name} has no version {shown}")
    fmt = _format(form.get("fmt") or request.GET.get("format"))
    recent = Job.objects.filter(launch__recipe_name=recipe.name).select_related("launch").order_by("-id")[:10]
    return render(request, "dashboard/recipe.html", {
        "recipe": recipe, "versions": versions, "shown": version, "fmt": fmt, "formats": launched.FORMATS,
        "shown_text": launched.definition_text(recipe.name, version.definition, fmt),
        "text": form.get("text", launched.definition_text(recipe.name, recipe.definition, fmt)),
        "error": form.get("error"), "can_edit": has_role(request.user, "admin"), "recent": recent,
        "params": version.definition["params"], "devices_text": launched.devices_text(version.definition["devices"]),
        "runs_on": launched.runs_on(version.definition),
    }, status=status)


@require_POST
@require_role("admin")
def _edit(request, name):
    recipe = get_object_or_404(Recipe, name=name)
    text, fmt = request.POST.get("definition", ""), request.POST.get("format", "yaml")
    try:
        document = launched.parse_definition(text, fmt)
        if document.get("name", name) != name:
            raise InputError("name", f"name cannot change (this recipe is {name!r}, the definition says "
                                     f"{document.get('name')!r}): create a new recipe for a new name")
        recipe, outcome = Recipe.define(name, {k: v for k, v in document.items() if k != "name"}, request.user)
    except InputError as err:
        return _detail_page(request, name, status=400, text=text, fmt=_format(fmt), error=err)
    if outcome == "unchanged":
        messages.info(request, f"Recipe {name} is unchanged: the definition is the same as version {recipe.version}.")
    else:
        messages.success(request, f"Recipe {name} is now version {recipe.version}.")
    return redirect("recipe", name=name)


# -- a launched job's Restart, and the parts a live page redraws ------------------------------------------


@require_POST
@require_role("operator")
def restart_job(request, job_id):
    """Restart: a new job of a launched job's recipe and values, from the beginning (it has no checkpoint to
    resume from). To the new job's page, or back to the page the button was on with the refusal."""
    job = get_object_or_404(Job, pk=job_id, launch__isnull=False)
    try:
        new = kind.restart(job, by=request.user)
    except InputError as err:
        messages.error(request, f"Not restarted: {err.message}.")
        nxt = request.POST.get("next", "")
        return redirect(nxt if nxt.startswith("/") and not nxt.startswith("//") else f"/jobs/{job.pk}")
    messages.success(request, f"Job {new.pk} {new.name!r} queued: it restarts job {job.pk}'s recipe "
                              f"{new.launch.recipe_name} from the beginning.")
    return redirect("job", job_id=new.pk)


PARTS = {"controls": "dashboard/_job_controls.html", "launch": "dashboard/_launch_card.html",
         "base_build": "dashboard/_base_build.html"}


@never_cache
@require_GET
@require_role("viewer")
def job_part(request, job_id, part):
    """A part of the job pages as the server renders it now: a live page swaps it in when the job's status
    changes (its controls, Restart included; a launched job's argv, devices and exit once it starts or ends; what
    the cost says of the base-policy build once the build is no longer running)."""
    if part not in PARTS:
        raise Http404(f"no part {part!r}")
    job = get_object_or_404(Job.objects.select_related("created_by"), pk=job_id)
    launch = launched.launch_view(job) if part == "launch" else None
    if part == "launch" and launch is None:
        raise Http404(f"job {job.pk} is not a launched job")
    nxt = request.GET.get("next", "")
    return render(request, PARTS[part], {
        "job": job, "next": nxt if nxt.startswith("/") and not nxt.startswith("//") else f"/jobs/{job.pk}",
        "launched": launch, "base_build": base_build(job) if part == "base_build" else None,
    })

"""The pages: each view parses its parameters, reads through dashboard.readings, and renders.

Job controls (start, stop, resume) are small form views for operators that
call the same trainer methods as the JSON API (`Job.start`, `request_stop`,
`resume`), so a page without JavaScript still works and CSRF protects them.
"""

import base64
import functools
import gzip
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlencode

import plotly
from django.contrib import messages
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from collector.models import Node
from costs import report, tokens
from costs.activity import BUSY_PCT, IDLE_TENSOR_PCT, THROTTLED_SHARE, job_activity, job_mfu
from costs.intelligence import base_build, job_intelligence, score_cost_curve
from dashboard import figures, fleetstate, health, launched, readings, views_queue
from dashboard.cards import cost_review_cards
from dashboard.forms import FORM_CONFIG, PRESETS, STOP_LOSS_FIELDS, LaunchForm, StartForm, stop_loss_input
from dashboard.timerange import RANGES, from_request
from launch.models import Recipe
from tracking import store as tracking_store
from tracking.models import SCORE_KEY_TAG, TrackingError
from trainer import queue, stoploss
from trainer.models import CONTROLS, Job, Step
from trainer.workers import live_workers
from yardstick.auth import require_role, role_of
from yardstick.http import bad_page, int_param, script_json, script_text, without_trailing_slash
from yardstick.inputs import InputError

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
COMPARE_MAX = 8


def _or_400(request, parse, *args, **kwargs):
    """(parse(request.GET, ...), None), or (None, the 400 page naming what was wrong)."""
    try:
        return parse(request.GET, *args, **kwargs), None
    except InputError as err:
        return None, bad_page(request, err.field, err.message)


def _range_or_400(request, default="1h"):
    return _or_400(request, from_request, default=default)


def _range_context(request, tr):
    base = {k: v for k, v in request.GET.items() if k not in ("range", "from", "to", "live")}
    links = []
    for key in RANGES:
        q = tr.query(range=key, **{"from": None, "to": None}) if tr.key == "custom" else tr.query(range=key)
        params = "&".join(filter(None, [q] + [f"{k}={v}" for k, v in base.items()]))
        links.append({"key": key, "href": f"?{params}", "current": key == tr.key})
    return {"tr": tr, "range_links": links, "range_extra": base}


@never_cache
@require_GET
def healthz(request):
    """Public: the state of every part; 200 when all are fine, else 503."""
    result = health.report()
    return JsonResponse(result, status=200 if result["ok"] else 503)


@require_GET
@require_role("viewer")
def whoami(request):
    """The caller's identity and role, for scripts checking their token."""
    return JsonResponse({"username": request.user.username, "role": role_of(request.user)})


@require_GET
def plotly_js(request, version):
    """plotly.js from the installed plotly package (never a CDN); the version in the URL makes it cacheable forever.
    Gzipped for a browser that takes it: 4.8 MB becomes 1.4 MB, which over a VPN is most of a cold page load."""
    if version != plotly.__version__:
        raise Http404("no such plotly version")
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        resp = HttpResponse(_plotly_gzipped(), content_type="text/javascript; charset=utf-8")
        resp["Content-Encoding"] = "gzip"
    else:
        resp = FileResponse(open(PLOTLY_JS, "rb"), content_type="text/javascript; charset=utf-8")
    resp["Vary"] = "Accept-Encoding"
    resp["Cache-Control"] = "private, max-age=31536000, immutable"
    return resp


@functools.cache
def _plotly_gzipped():
    """plotly.js gzipped, once a process (0.2 s of CPU; 1.4 MB kept)."""
    return gzip.compress(PLOTLY_JS.read_bytes(), compresslevel=6, mtime=0)


# -- fleet ---------------------------------------------------------------------------------------


FLEET_GROUPS = ("auto", "device", "node", "model")  # and "label:<key>"
FLEET_CELLS = ("mean", "worst")
SEARCH_MAX = 200
FLEET_MAX_CELLS = 2000  # past this the heatmap groups (static/yardstick/fleet.js has the same figure)
FLEET_LISTS = (  # the lists beside the heatmap (fleet.js fills them): key, title, what is in it and in what order
    ("idle", "Idle", "reporting, util < 10%: lowest utilization first, then highest power"),
    ("throttled", "Throttled", "clocks held down now (power cap, thermal, sync boost, HW slowdown): lowest utilization first"),
    ("unhealthy", "Unhealthy", "a critical health event in the last 24 h"),
    ("stale", "Stale", "no sample for 3 of their node's intervals: oldest sample first"),
)


def fleet_view_params(params):
    """The fleet page's own parameters, checked: {"group", "cell", "filters": {"node"|"model"|"label:<key>": value},
    "q", "sort", "order", "page"}. InputError names a wrong one and what it accepts."""
    group = params.get("group", "auto")
    if group not in FLEET_GROUPS and not (group.startswith("label:") and 6 < len(group) <= 106):
        raise InputError("group", f"group must be one of {', '.join(FLEET_GROUPS)} or label:<key>, got {group!r}")
    cell = params.get("cell", "mean")
    if cell not in FLEET_CELLS:
        raise InputError("cell", f"cell must be one of {', '.join(FLEET_CELLS)}, got {cell!r}")
    sort = params.get("sort", "name")
    if sort not in readings.NODE_SORTS:
        raise InputError("sort", f"sort must be one of {', '.join(readings.NODE_SORTS)}, got {sort!r}")
    order = params.get("order", "asc")
    if order not in ("asc", "desc"):
        raise InputError("order", f"order must be asc or desc, got {order!r}")
    raw_page = params.get("page", "1")
    if not raw_page.isdigit() or not 1 <= int(raw_page) <= 10**6:
        raise InputError("page", f"page must be a whole number from 1, got {raw_page!r}")
    filters = {}
    for key, value in params.items():
        if key in ("node", "model") or key.startswith("label:"):
            if len(value) > SEARCH_MAX or len(key) > 106 or key == "label:":
                raise InputError(key, f"{key} must be at most {SEARCH_MAX} characters, got {len(value)}")
            filters[key] = value
    q = params.get("q", "").strip()
    if len(q) > SEARCH_MAX:
        raise InputError("q", f"the search must be at most {SEARCH_MAX} characters, got {len(q)}")
    return {"group": group, "cell": cell, "filters": filters, "q": q, "sort": sort, "order": order,
            "page": int(raw_page)}


def _table_links(request, table):
    """The node table's sort and page links, each keeping the page's other parameters."""
    keep = {k: v for k, v in request.GET.items() if k not in ("sort", "order", "page")}

    def href(**changes):
        return "?" + urlencode({**keep, **{k: v for k, v in changes.items() if v is not None}})

    sorts = {key: href(sort=key, order="desc" if table["sort"] == key and table["order"] == "asc" else "asc")
             for key in readings.NODE_SORTS}
    pages = {"prev": href(sort=table["sort"], order=table["order"], page=table["page"] - 1) if table["page"] > 1 else None,
             "next": href(sort=table["sort"], order=table["order"], page=table["page"] + 1)
             if table["page"] < table["pages"] else None}
    return {"sort_links": sorts, "page_links": pages}


@require_GET
@require_role("viewer")
def fleet_page(request):
    tr, bad = _range_or_400(request)
    if bad:
        return bad
    view, bad = _or_400(request, fleet_view_params)
    if bad:
        return bad
    data = readings.fleet_overview(table=view)
    layout, frame = data.pop("layout"), data.pop("frame")
    figs = {"power": figures.fleet_power(readings.fleet_power(tr), tr.start, tr.end)}
    # The layout's JSON is made once per layout (layout.data_json), not encoded again for each page.
    frame_b64 = base64.b64encode(fleetstate.encode(frame, fleetstate.frame_header(frame, layout, 0))).decode()
    start = script_text(f'{{"layout":{layout.data_json},"frame":"{frame_b64}"}}')
    return render(request, "dashboard/fleet.html", {
        **data, **_range_context(request, tr), "figures_json": script_json(figs), "fleet_start": start,
        "view": view, **_table_links(request, data["table"]), "max_cells": f"{FLEET_MAX_CELLS:,}",
        "label_keys": readings.label_keys(layout), "lists": FLEET_LISTS,
        "topics": "fleet,costs" if tr.live and tr.follows_now else "",
    })


@require_GET
@require_role("viewer")
def fleet_nodes(request):
    """The node table alone, as the fleet page swaps it in when its filters, search, sort or page change."""
    view, bad = _or_400(request, fleet_view_params)
    if bad:
        return bad
    layout, frame, unhealthy = readings.fleet_snapshot()
    table = readings.node_table(layout, frame, unhealthy, view)
    return render(request, "dashboard/_node_table.html", {"table": table, **_table_links(request, table)})


@require_GET
@require_role("viewer")
def node_page(request, name):
    node = Node.objects.filter(name=name).first()
    if node is None and name.endswith("/"):  # the URL style's trailing slash, not a node named so
        return without_trailing_slash(request, request.path.strip("/"))
    if node is None:
        raise Http404(f"no node {name!r}")
    tr, bad = _range_or_400(request)
    if bad:
        return bad
    return render(request, "dashboard/node.html", _node_context(request, node, tr))


def _node_context(request, node, tr):
    series = readings.node_view(node, tr)
    figs = dict(figures.node_figures(series, tr.resolution, tr.start, tr.end))
    devices = [d for d, _ in series]
    return {
        "node": node, "devices": devices, **_range_context(request, tr), "figures_json": script_json(figs),
        "fig_keys": list(figs), "health_events": readings.node_health_events(node),
        "health_shown": readings.HEALTH_EVENTS_SHOWN,
        "any_simulated": any(d["simulated"] for d in devices),
        "any_estimated": any(d["power_estimated"] for d in devices),
        "topics": f"node.{node.pk}" if tr.live and tr.follows_now and tr.resolution == "raw" else "",
    }


@require_POST
@require_role("admin")
def set_node_owner(request, name):
    """An admin sets the team charged for the node's idle time (Node.set_owner); a bad team stores nothing.

    Back to the node page either way (its range picker's links are relative to it), with what happened.
    """
    node = get_object_or_404(Node, name=name)
    try:
        team = node.set_owner(request.POST.get("team", ""))
    except ValueError as err:
        messages.error(request, f"Owner not changed: {err}.")
    else:
        messages.success(request, f"Node {node.name} is now owned by team {team!r}; its idle time is charged to it."
                         if team else f"Node {node.name} has no owner now; its idle time is charged to 'unassigned'.")
    return redirect("node", name=node.name)


# -- jobs --------------------------------------------------------------------------------------------


def _jobs_context(request, form=None, filters=None, what=None):
    """The Jobs page: its table and the Start form, as `form` left it (a StartForm, or a LaunchForm when a
    recipe was picked: `what` is then "recipe:<name>")."""
    from trainer.rl.envs import ENV_NAMES  # here, not at the top: trainer.rl loads torch, which no other page needs

    builtin = form if isinstance(form, StartForm) else StartForm()
    launching = isinstance(form, LaunchForm)
    errors = {k.removeprefix("config."): v for k, v in form.errors.items()} if form is not None else {}
    values = builtin.initial()
    if launching:
        values.update({k: v for k, v in form.data.items() if k != "csrfmiddlewaretoken"})
    what = what or (f"recipe:{form.recipe_name}" if launching else "builtin")
    recipes = launched.recipe_choices(what.removeprefix("recipe:"), form.data if launching else None,
                                      errors if launching else None)
    workers = live_workers()
    return {
        "what": what, "recipes": recipes, "recipe_picked": what.startswith("recipe:"),
        "recipe_env": form.data.get("env", "") if launching else "",
        "builtin_errors": {} if launching else errors, "error_links": _error_links(errors, form),
        "rows": readings.jobs_table(filters), "filters": filters or {}, "filter_choices": readings.jobs_filter_choices(),
        "form_values": values, "form_errors": errors, "presets": PRESETS, "envs": ENV_NAMES,
        "config_fields": [{"name": n, "kind": k, "label": label} for n, k, label in FORM_CONFIG],
        "stop_loss_fields": _stop_loss_fields(),
        "presets_json": script_json({k: {"env": env, "config": cfg} for k, (_, env, cfg) in PRESETS.items()}),
        "topics": "jobs,costs",
        "spark_max": readings.SPARK_POINTS,
        "workers": launched.worker_rows(workers), "worker_nodes": sorted({w.host for w in workers}),
        "worker_pools": sorted({w.team for w in workers} - {""}),
        "priorities": views_queue.priorities(request.user), **views_queue.panel_context(request),
    }


def _error_links(errors, form):
    """[(the id of the input at fault, message)] for the Start form's list of what to fix."""
    recipe = form.recipe_name if isinstance(form, LaunchForm) else None
    links = []
    for field, message in errors.items():
        if recipe and (field.startswith("params.") or field in ("env", "init_from", "init_step", "cluster")):
            target = f"f-{recipe}-{field.removeprefix('params.').replace('init_step', 'init_from')}"
        elif field == "recipe":
            target = "f-what"
        elif recipe and field == "devices":
            target = "e-devices"
        else:
            target = f"f-{field}"
        links.append((target, message))
    return links


def _stop_loss_fields():
    return [{"name": f"stop_loss.{key}", "label": label, "hint": hint} for key, label, hint in STOP_LOSS_FIELDS]


@require_GET
@require_role("viewer")
def jobs_page(request):
    """The Jobs list (filtered by ?status=, kind, recipe, cluster, team, user) and the Start form: opened with a
    recipe picked (?what=recipe:<name>), or filled as a launched job was started (?again=<job>: "Run again...") or
    for a Continue of one (?continue=<job>&what=recipe:<name>)."""
    try:
        filters = readings.jobs_filter(request.GET)
        form = _prefilled(request)
    except InputError as err:
        return bad_page(request, err.field, err.message)
    what = request.GET.get("what", "")  # "recipe:<name>": the Start form opens with that recipe picked
    if form is not None or not what.startswith("recipe:"):
        what = None
    return render(request, "dashboard/jobs.html", {**_jobs_context(request, form, filters=filters, what=what),
                                                   "form_open": bool(what or form)})


def _prefilled(request):
    """The Start form filled for "Run again..." (?again=<launched job>) or a Continue (?continue=<launched job>
    &what=recipe:<a recipe that names {init_from}>), unchecked until it is posted; None when neither is asked."""
    query = request.GET
    key = "again" if query.get("again") else "continue" if query.get("continue") else None
    if key is None:
        return None
    job_id = int_param(request, key, None, minimum=1, maximum=2**31 - 1)
    job = Job.objects.filter(pk=job_id, launch__isnull=False).select_related("launch").first()
    if job is None:
        raise InputError(key, f"{key} must be the id of a launched job, got {query[key]!r}")
    if key == "again":
        if not Recipe.objects.filter(name=job.launch.recipe_name).exists():
            raise InputError("again", f"job {job.pk}'s recipe {job.launch.recipe_name!r} is no longer defined, so it "
                                      "cannot run again")
        fields = launched.again_fields(job)
    else:
        name = query.get("what", "").removeprefix("recipe:")
        recipe = next((r for r in launched.continuations(job) if r.name == name), None)
        if recipe is None:
            offered = ", ".join(r.name for r in launched.continuations(job)) or (
                f"none: {job.continue_refusal() or 'no recipe names {init_from}'}")
            raise InputError("what", f"what must be recipe:<a recipe that continues job {job.pk}>, got {name!r}; "
                                     f"those that can: {offered}")
        fields = launched.continue_fields(job, recipe)
    return LaunchForm(fields, fields["what"].removeprefix("recipe:"))


@require_POST
@require_role("operator")
def start_job(request):
    """The Start form: the built-in trainer (Job.start), or a recipe ("what" = "recipe:<name>",
    launch.kind.start). A refusal shows the form again, each message beside its field, the values kept."""
    what = request.POST.get("what", "builtin")
    form = LaunchForm(request.POST, what.removeprefix("recipe:")) if what.startswith("recipe:") else StartForm(request.POST)
    job = form.save(request.user)
    if job is None:
        return render(request, "dashboard/jobs.html", {**_jobs_context(request, form), "form_open": True},
                      status=400)
    if job.in_line:
        where = f", {job.waiting_for}."
    elif isinstance(form, LaunchForm):
        where = f": recipe {job.launch.recipe_name} v{job.launch.recipe_version}, sent to {job.placed_on or 'its cluster'}."
    else:
        where = "."
    messages.success(request, f"Job {job.pk} {job.name!r} queued{where}")
    return redirect("job", job_id=job.pk)


def _control(action, done):
    """The Stop / Resume button: the model's action (CONTROLS), then back to the page it was on, saying
    `done(job)` or the model's refusal."""
    act, refusal = CONTROLS[action]

    @require_POST
    @require_role("operator")
    def view(request, job_id):
        job = get_object_or_404(Job, pk=job_id)
        if act(job, by=request.user.username):
            messages.success(request, done(job))
        else:
            messages.error(request, _sentence(refusal(job)))
        return _back(request, job)

    return view


stop_job = _control("stop", lambda job: f"Job {job.pk} is {job.status}.")
resume_job = _control("resume", lambda job: f"Job {job.pk} resumed: queued.")


def _sentence(refusal):
    """A model's refusal ("job 3 is completed; ...") as a message on the page: capitalised, with a full stop."""
    return f"{refusal[:1].upper()}{refusal[1:]}."


def _back(request, job):
    """To the page the button was on (a local path only), else the job's page."""
    nxt = request.POST.get("next", "")
    return redirect(nxt if nxt.startswith("/") and not nxt.startswith("//") else f"/jobs/{job.pk}")


@require_GET
@require_role("viewer")
def job_page(request, job_id):
    job = get_object_or_404(Job.objects.select_related("created_by"), pk=job_id)
    step = request.GET.get("step")
    try:
        step = int(step) if step not in (None, "") else None
    except ValueError:
        return bad_page(request, "step", f"step must be an integer, got {step!r}")
    live = request.GET.get("live", "1") != "0"
    x, cols = Step.columns(job, figures.JOB_KEYS)
    intel = job_intelligence(job)
    figs = figures.job_figures(x, cols, score_cost_curve(job), job.baseline_pass1)
    shown_step, samples, sample_steps = readings.job_samples(job, step)
    external = readings.external_run(job)
    logged = figures.run_metric_figures(readings.run_metric_series(external["run"])) if external else []
    figs.update({key: fig for _, key, fig in logged})
    activity = job_activity(job)
    what_if = None
    if request.GET.get("model") is not None:  # the what-if form of the "Price of a point" card
        try:
            what_if = tokens.what_if(job, *tokens.what_if_input(request.GET))
        except InputError as err:
            what_if = {"error": err.message, "param": err.field}
    return render(request, "dashboard/job.html", {
        "point": tokens.job_decomposition(job), "what_if": what_if, "what_if_models": tokens.models_to_price(),
        "what_if_query": {"model": request.GET.get("model", ""), "speedup": request.GET.get("speedup", "")},
        "launched": launched.launch_view(job),
        "job": job, "intel": intel, "figures_json": script_json(figs), "fig_keys": list(figs),
        "samples": samples, "sample_step": shown_step, "sample_steps": sample_steps,
        "history": job.status_changes.order_by("at", "id"), "stints": job.stints.order_by("started_at", "id"),
        "config_items": sorted(job.config.items()), "live": live, "last_step": x[-1] if x else None,
        "base_build": base_build(job),
        "topics": f"job.{job.pk},jobs,costs" if live else "",
        "external": external, "logged_figs": [{"group": g, "key": k} for g, k, _ in logged],
        "derived_keys_json": script_json(readings.derived_metric_keys() if external else []),
        "activity": activity, "mfu": job_mfu(job, activity), "throttled_share_pct": round(THROTTLED_SHARE * 100),
        "busy_pct": round(BUSY_PCT), "idle_tensor_pct": round(IDLE_TENSOR_PCT),
        "stop_loss_fields": _stop_loss_fields(), "stop_loss_text": stoploss.describe(job.stop_loss),
        "stop_loss_values": {f"stop_loss.{k}": v for k, v in job.stop_loss.items()},
        "priorities": views_queue.priorities(request.user),
    })


@require_POST
@require_role("operator")
def set_stop_loss(request, job_id):
    """The job page's stop-loss form: set the rule (all fields empty, or Remove, takes it off)."""
    job = get_object_or_404(Job, pk=job_id)
    raw = None if "remove" in request.POST else stop_loss_input(request.POST)
    try:
        rule = job.set_stop_loss(raw)
    except InputError as err:
        messages.error(request, f"Stop-loss not changed: {err.message}.")
    else:
        messages.success(request, f"Job {job.pk}: {stoploss.describe(rule)}." if rule else
                         f"Job {job.pk} has no stop-loss now.")
    return redirect(f"/jobs/{job.pk}#stop-loss")


@require_POST
@require_role("operator")
def set_score_key(request, job_id):
    """An operator sets which logged metric is the score of an external job's experiment
    (Experiment.set_score_key, as MLflow's set-experiment-tag does); empty goes back to the defaults."""
    job = get_object_or_404(Job, pk=job_id)
    run = getattr(job, "run", None)
    if run is None:
        messages.error(request, f"Job {job.pk} is not an external run: its score is its eval pass@1.")
        return redirect("job", job_id=job.pk)
    key = request.POST.get("score_key", "").strip()
    try:
        # As MLflow's set-experiment-tag does: validated, then every run of the experiment rescored.
        tracking_store.set_experiment_tag(run.experiment_id, SCORE_KEY_TAG, key)
    except TrackingError as err:
        messages.error(request, f"Score not changed: {err.message}.")
    else:
        messages.success(request, f"Experiment {run.experiment.name!r} now scores its runs by {key!r}." if key else
                         f"Experiment {run.experiment.name!r} scores its runs by the default keys again.")
    return redirect("job", job_id=job.pk)


# -- compare ------------------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def compare_page(request):
    # ?jobs=1,2 (shareable) or ?pick=1&pick=2 (the Jobs page's checkboxes, no JavaScript needed).
    raw = ",".join([request.GET.get("jobs", "")] + request.GET.getlist("pick"))
    xmode = request.GET.get("x", "step")
    errors = []
    if xmode not in figures.XMODES:
        errors.append(f"x must be one of {', '.join(figures.XMODES)}, got {xmode!r}")
        xmode = "step"
    ids = []
    for part in filter(None, (p.strip() for p in raw.split(","))):
        if not (part.isascii() and part.isdigit() and len(part) <= 18):  # "²".isdigit() is True; int("²") fails
            errors.append(f"jobs must be job ids separated by commas, like 1,2,3; got {part!r}")
            continue
        ids.append(int(part))
    ids = list(dict.fromkeys(ids))[:COMPARE_MAX]
    found = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
    errors += [f"no job {i}" for i in ids if i not in found]
    jobs = [found[i] for i in ids if i in found]
    series = [(job, readings.compare_points(job)) for job in jobs]
    table = [{"job": job, **job_intelligence(job)} for job in jobs]
    facts = tokens.job_facts([j.pk for j in jobs])
    points = [{"job": job, **tokens.decomposition(facts[job.pk])} for job in jobs]
    for p in points:
        p["generation_share"] = next((ph["share_display"] for ph in p["phases"] if ph["phase"] == "generation"), None)
    return render(request, "dashboard/compare.html", {
        "points": points,
        "jobs": jobs, "ids": ",".join(str(j.pk) for j in jobs), "xmode": xmode, "xmodes": figures.XMODES,
        "table": table, "errors": errors, "figures_json": script_json({"compare": figures.compare(series, xmode)}),
        "recent": Job.objects.order_by("-id")[:30], "any_example": any(r["example_prices"] for r in table),
    }, status=400 if errors and not jobs else 200)


# -- costs -----------------------------------------------------------------------------------------------


def _dollars_by_phase(totals):
    """The Costs page's line of the attributed dollars by phase: [{key, label, usd (exact), share}]."""
    labels = {"generation": "generation", "training": "training", "evaluation": "evaluation",
              "steps_other": "rest of the steps", "waiting": "waiting", "no_split": "no split"}
    whole = Decimal(totals["attributed_exact_usd"] or 0)
    out = []
    for key in report.PHASE_COLUMNS:
        usd = Decimal(totals[f"{key}_exact_usd"] or 0)
        out.append({"key": key, "label": labels[key], "usd": usd,
                    "share": f"{usd / whole * 100:.1f} %" if whole > 0 else None})
    return out


@require_GET
@require_role("viewer")
def costs_page(request):
    try:
        period, group, _ = report.parse_params(request.GET)
    except InputError as err:
        return bad_page(request, err.field, err.message)
    table = report.build(period, group)
    stacks = readings.cost_stacks(period, group)
    line_waits = queue.waits(period.start, period.end)
    if line_waits:  # each team's spend beside its waits: the table grouped by team (built again only if not so)
        by_team = table if group == "team" else report.build(period, "team")
        spend = {r["key"]: r["attributed_usd"] for r in by_team.rows}
        line_waits = [{**w, "spend_usd": spend.get(w["team"])} for w in line_waits]
    last_day = (period.end - timedelta(microseconds=1)).date()
    params = {"from": period.start.date().isoformat(), "to": last_day.isoformat(), "group": group}
    return render(request, "dashboard/costs.html", {
        "phases": _dollars_by_phase(table.totals), "generation_by_model": tokens.generation_by_model(period.start, period.end),
        "report": table, "rows": table.rows, "totals": table.totals, "group": group, "groups": report.GROUPS,
        "from_day": params["from"], "to_day": params["to"], "note": report.EXAMPLE_PRICES_NOTE,
        # The exact period shown, so the download has the same figures as the page.
        "csv_href": "/api/costs?" + urlencode({"from": period.start.isoformat(), "to": period.end.isoformat(),
                                               "group": group, "format": "csv"}),
        "figures_json": script_json({"by_day": figures.costs_by_day(stacks)}),
        "generated_at": timezone.now(),
        "no_telemetry": not Node.objects.exists(),  # no collector ever reported: its empty table says to start one
        "line_waits": line_waits,
        "extra_cards": cost_review_cards(period),
    })

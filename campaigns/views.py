"""Campaign pages and the /api/campaigns API: each view parses its input and makes one call into
campaigns.models (state) or campaigns.figures (what it bought).

Viewers read; operators (and admins) create campaigns, add runs, start and stop loops, and Continue a job.
API errors are `{"error": message}`, plus `"field"` for bad input (400) and `"loop"` when the loop is in
the wrong state (409), as /api/jobs answers.
"""

import csv
import io
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from campaigns import charts, figures
from campaigns.models import Campaign, continuations
from costs.report import EXAMPLE_PRICES_NOTE
from launch.models import Recipe, evaluates, names_init_from
from trainer.models import Job
from yardstick.auth import require_role
from yardstick.http import bad, bad_page, int_param, methods, script_json
from yardstick.inputs import InputError, form_json_object, json_object
from yardstick.text import csv_text

CREATE_FIELDS = ("name", "team", "envs", "schedule", "run_config", "budget_usd", "device", "eval_size",
                 "run_recipe", "continue_recipe", "run_params", "eval_recipes",
                 "start_from", "start_step", "loop")
POINTS_MAX = 100


def _missing(campaign_id):
    return JsonResponse({"error": f"no campaign {campaign_id}"}, status=404)


def _points(request):
    """?points= (the projection's N), an integer 1..POINTS_MAX; InputError naming it."""
    return int_param(request, "points", figures.PROJECTION_POINTS_DEFAULT, 1, POINTS_MAX)


# -- /api/campaigns ----------------------------------------------------------------------------


@require_role("viewer")
def _list(request):
    Campaign.join_tagged_runs()
    return JsonResponse({"campaigns": [c.to_dict() for c in Campaign.objects.select_related("created_by")[:200]]})


@require_role("operator")
def _create(request):
    """Create from {name, team, envs, schedule, run_config, budget_usd, device, eval_size, start_from,
    start_step, loop} (built-in runs) or {name, team, envs, schedule, budget_usd, run_recipe, continue_recipe,
    run_params, eval_recipes, loop} (launched runs); 201 with the campaign."""
    try:
        body = json_object(request.body)
        unknown = sorted(set(body) - set(CREATE_FIELDS))
        if unknown:
            raise InputError(unknown[0],
                             f"unknown field {unknown[0]!r}; accepted fields are {', '.join(CREATE_FIELDS)}")
        given = {k: body[k] for k in CREATE_FIELDS if k in body}
        campaign = Campaign.create(**{"name": None, "team": None, "envs": None, **given}, created_by=request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(campaign.to_dict(), status=201)


campaigns_api = methods(GET=_list, POST=_create)


@require_role("viewer")
def _detail(request, campaign_id):
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is None:
        return _missing(campaign_id)
    try:
        points = _points(request)
    except InputError as err:
        return bad(err.field, err.message)
    Campaign.join_tagged_runs()  # an external run tagged since the last periodic join is in the figures already
    return JsonResponse({**campaign.to_dict(), "figures": figures.summary(campaign, points)})


campaign_api = methods(GET=_detail)


@require_role("operator")
def _add_run(request, campaign_id):
    """Add a job: {"job": id}; 201 with the campaign."""
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is None:
        return _missing(campaign_id)
    try:
        body = json_object(request.body)
        job_id = body.get("job")
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise InputError("job", f"job must be the id of a job, got {job_id!r}")
        job = Job.objects.filter(pk=job_id).first()
        if job is None:
            raise InputError("job", f"job must be the id of a job; there is no job {job_id}")
        campaign.add_run(job)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(campaign.to_dict(), status=201)


campaign_runs_api = methods(POST=_add_run)


@require_role("operator")
def _loop_start(request, campaign_id):
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is None:
        return _missing(campaign_id)
    if not campaign.start_loop(by=request.user.username):
        return JsonResponse({"error": campaign.loop_refusal() or campaign.loop_reason, "loop": campaign.loop},
                            status=409)
    return JsonResponse(campaign.to_dict())


@require_role("operator")
def _loop_stop(request, campaign_id):
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is None:
        return _missing(campaign_id)
    if not campaign.stop_loop(by=request.user.username):
        return JsonResponse({"error": f"campaign {campaign.pk}'s loop is {campaign.loop}, not running",
                             "loop": campaign.loop}, status=409)
    return JsonResponse(campaign.to_dict())


loop_start_api = methods(POST=_loop_start)
loop_stop_api = methods(POST=_loop_stop)


# -- CSV -----------------------------------------------------------------------------------------

CSV_COLUMNS = ("run", "job_id", "name", "env", "status", "cost_usd", "cumulative_usd", "own_gain_points",
               "net_gain_points", "marginal_ipd_points_per_usd", "net_ipd_points_per_usd", "usd_per_point")


def to_csv(campaign, summary):
    """Per run its figures, then a total row: money exact to the micro-dollar; names guarded against
    spreadsheet formulas as the cost review's CSV guards them."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_COLUMNS)

    def cell(v):
        return "" if v is None else str(v)

    for r in summary["runs"]:
        out.writerow([r["n"], r["job_id"], csv_text(r["name"]), r["env"], r["status"], r["cost_usd"],
                      r["cumulative_usd"], cell(r["own_gain_points"]), cell(r["net_gain_points"]),
                      cell(r["marginal_ipd"]), cell(r["net_ipd"]), cell(r["usd_per_point"])])
    out.writerow(["TOTAL", "", csv_text(campaign.name), "", "", summary["cost_usd"], summary["cost_usd"], "",
                  cell(summary["net_gain_points"]), "", cell(summary["net_ipd"]), cell(summary["usd_per_net_point"])])
    return buf.getvalue()


@never_cache
@require_GET
@require_role("viewer")
def campaign_csv(request, campaign_id):
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is None:
        return _missing(campaign_id)
    resp = HttpResponse(to_csv(campaign, figures.summary(campaign)), content_type="text/csv; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="campaign-{campaign.pk}.csv"'
    return resp


# -- pages ------------------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def campaigns_page(request):
    # here: trainer.rl loads torch, which only this path needs
    from trainer.rl.envs import ENV_NAMES

    rows = [(c, figures.summary(c)) for c in Campaign.objects.select_related("created_by")[:200]]
    # A link may fill the New campaign form in (a sweep's "Start a campaign from this trial"), and a refused form
    # comes back with what was typed.
    prefill = {k: request.GET.get(k, "")[:2000] for k in FORM_FIELDS}
    # The recipes a loop can start from (no {init_from}), those that train on from a run (they name it: with a first
    # run's recipe and values given, only those that take them, its own continuation first) and the evaluation
    # recipes that score one (they name it too, and train nothing).
    recipes = {"first": [], "more": [], "scorers": []}
    everything = list(Recipe.objects.all())
    setups = {r.definition.get("setup") for r in everything}  # another's shared setup: no run of a loop
    for recipe in everything:
        if not names_init_from(recipe.definition):
            if recipe.name not in setups:
                recipes["first"].append(recipe)
        elif evaluates(recipe.definition):
            recipes["scorers"].append(recipe)
    try:
        given = form_json_object("run_params", prefill["run_params"], "{}")
    except InputError:
        given = {}  # said when the form is sent
    recipes["more"] = continuations(prefill["run_recipe"], given)
    if prefill["run_recipe"] and not prefill["continue_recipe"] and recipes["more"]:
        prefill["continue_recipe"] = recipes["more"][0].name
    return render(request, "campaigns/campaigns.html", {"rows": rows, "envs": ENV_NAMES, "recipes": recipes,
                                                        "prefill": prefill, "prefilled": any(prefill.values())})


# What the New campaign form sends, and what a link (or a refused form) may fill it in with.
FORM_FIELDS = ("name", "team", "envs", "schedule", "steps", "run_recipe", "continue_recipe", "eval_recipe",
               "run_params", "budget_usd", "loop")


@require_POST
@require_role("operator")
def create_campaign(request):
    """The list page's form: envs and schedule as comma-separated names, run steps as one number."""
    post = request.POST
    envs = [e.strip() for e in post.get("envs", "").split(",") if e.strip()]
    schedule = [e.strip() for e in post.get("schedule", "").split(",") if e.strip()] or None
    run_config = {}
    try:
        if post.get("steps", "").strip():
            if not post["steps"].strip().isdigit() or len(post["steps"].strip()) > 9:
                raise InputError("steps",
                                 f"steps must be a whole number of GRPO updates per run, got {post['steps']!r}")
            run_config["steps"] = int(post["steps"])
        launched = {}
        if post.get("run_recipe") or post.get("continue_recipe") or post.get("eval_recipe") or post.get("run_params"):
            launched = {"run_recipe": post.get("run_recipe", ""), "continue_recipe": post.get("continue_recipe", ""),
                        "run_params": form_json_object("run_params", post.get("run_params", ""),
                                                                 '{"max_steps": 200}'),
                        "eval_recipes": {env: post["eval_recipe"] for env in envs} if post.get("eval_recipe") else {}}
        campaign = Campaign.create(name=post.get("name"), team=post.get("team"), envs=envs, schedule=schedule,
                                   run_config=run_config, budget_usd=post.get("budget_usd") or None,
                                   loop=post.get("loop") == "on", created_by=request.user, **launched)
    except InputError as err:
        messages.error(request, f"Campaign not created: {err.message}.")
        typed = {k: post[k][:2000] for k in FORM_FIELDS if post.get(k)}
        return redirect(f"{reverse('campaigns')}?{urlencode(typed)}#new-campaign")  # the form open, as it was sent
    messages.success(request, f"Campaign {campaign.pk} {campaign.name!r} created.")
    return redirect("campaign", campaign_id=campaign.pk)


@require_GET
@require_role("viewer")
def campaign_page(request, campaign_id):
    campaign = get_object_or_404(Campaign, pk=campaign_id)
    try:
        points = _points(request)
    except InputError as err:
        return bad_page(request, err.field, err.message)
    Campaign.join_tagged_runs()
    summary = figures.summary(campaign, points)
    live = request.GET.get("live", "1") != "0"
    context = {"campaign": campaign, "s": summary,
               "figures_json": script_json(charts.campaign_charts(campaign, summary)),
               "latest": campaign.latest_job(), "live": live, "points": points,
               "topics": f"campaign.{campaign.pk},jobs,costs" if live else "", "example_note": EXAMPLE_PRICES_NOTE}
    template = "campaigns/_body.html" if request.GET.get("part") == "body" else "campaigns/campaign.html"
    return render(request, template, context)


@require_POST
@require_role("operator")
def start_loop(request, campaign_id):
    campaign = get_object_or_404(Campaign, pk=campaign_id)
    if campaign.start_loop(by=request.user.username):
        messages.success(request, f"Campaign {campaign.pk}'s loop is running: {campaign.loop_reason}.")
    else:
        messages.error(request, f"Loop not started: {campaign.loop_refusal() or campaign.loop_reason}.")
    return redirect("campaign", campaign_id=campaign.pk)


@require_POST
@require_role("operator")
def stop_loop(request, campaign_id):
    campaign = get_object_or_404(Campaign, pk=campaign_id)
    if campaign.stop_loop(by=request.user.username):
        messages.success(request, f"Campaign {campaign.pk}'s loop is stopped, and its current run with it.")
    else:
        messages.error(request, f"Campaign {campaign.pk}'s loop is {campaign.loop}, not running.")
    return redirect("campaign", campaign_id=campaign.pk)


@require_POST
@require_role("operator")
def continue_job(request, job_id):
    """Continue: a new job on the chosen env (default the job's) from this job's final checkpoint, with its
    config (the steps as given); it joins the job's campaign, if any. Back to the page the form was on with
    the refusal, or to the new job's page."""
    job = get_object_or_404(Job, pk=job_id)
    post = request.POST
    env = post.get("env") or job.env
    config = {k: v for k, v in job.config.items() if k != "env"}
    try:
        steps = post.get("steps", "").strip()
        if steps:
            if not steps.isdigit():
                raise InputError("steps", f"steps must be a whole number of GRPO updates, got {steps!r}")
            config["steps"] = int(steps)
        new = Job.start(name=post.get("name") or f"{job.name} (continued)", team=job.team, env=env, config=config,
                        device=job.device, created_by=request.user, init_from=job.pk)
    except InputError as err:
        messages.error(request, f"Not continued: {err.message}.")
        nxt = post.get("next", "")
        return redirect(nxt if nxt.startswith("/") and not nxt.startswith("//") else f"/jobs/{job.pk}")
    messages.success(request, f"Job {new.pk} {new.name!r} queued: it continues job {job.pk} on {env}.")
    return redirect("job", job_id=new.pk)

"""Sweep pages and the /api/sweeps API: each view parses its input and makes one call into sweeps.models (state)
or sweeps.figures (what the sweep bought).

Viewers read; operators (and admins) create sweeps of any recipe, stop them, lower their budgets and run them
again; only admins raise a budget. API errors are `{"error": message}`, plus `"field"` for bad input (400) and
`"state"` when the sweep is in the wrong state (409), as /api/campaigns answers.
"""

import csv
import io
import json
from decimal import Decimal
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from campaigns.models import continuations
from costs.intelligence import jobs_money
from costs.money import exact_usd
from costs.report import EXAMPLE_PRICES_NOTE
from launch.models import Launch, Recipe, evaluates, names_init_from
from launch.space import SPACE_MAX
from sweeps import charts, figures, search
from sweeps.models import FIELDS, PARALLEL_DEFAULT, SEED_PARAM, TRIALS_DEFAULT, State, Sweep
from trainer.models import Status
from yardstick.auth import require_role
from yardstick.http import bad, methods, script_json
from yardstick.inputs import InputError, form_json_object, json_object
from yardstick.text import csv_text

SPACE_EXAMPLE = '{"lr": {"low": 1e-5, "high": 1e-3, "log": true}}'


def _missing(sweep_id):
    return JsonResponse({"error": f"no sweep {sweep_id}"}, status=404)


def to_dict(sweep, summary=None):
    return {**sweep.definition(), "id": sweep.pk, "recipe_version": sweep.recipe_version, "state": sweep.state,
            "why": sweep.why, "reason": sweep.reason,
            "created_by": sweep.created_by.username if sweep.created_by_id else None,
            "created_at": sweep.created_at.isoformat(),
            "ended_at": sweep.ended_at.isoformat() if sweep.ended_at else None,
            **({"figures": summary} if summary is not None else {})}


# -- /api/sweeps -----------------------------------------------------------------------------------------


@require_role("viewer")
def _list(request):
    sweeps = list(Sweep.objects.select_related("created_by")[:200])
    spent = figures.spent(sweeps)
    return JsonResponse({"sweeps": [{**to_dict(s), "spent_usd": exact_usd(spent[s.pk][0]), "trials": spent[s.pk][1]}
                                    for s in sweeps]})


@require_role("operator")
def _create(request):
    """Create from {FIELDS}; 201 with the sweep and its first trials."""
    try:
        body = json_object(request.body)
        _json_numbers(body)
        sweep = Sweep.create(created_by=request.user, **body)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(to_dict(sweep, figures.summary(sweep)), status=201)


# The fields a JSON body gives as numbers (the form sends text, which Sweep.create reads): a string there ("2",
# "1e-5") is refused, not taken silently. budget_usd, like every amount of money in the API, may be either.
JSON_NUMBERS = ("parallel", "max_trials", "seed", "stop_share", "stop_min_trials", "target_score")


def _json_numbers(body):
    for key in JSON_NUMBERS:
        if isinstance(body.get(key), str):
            raise InputError(key, f"{key} must be a JSON number, got the string {body[key]!r} (write {body[key]} "
                                  "without quotes)")
    space = body.get("space")
    for name, entry in (space.items() if isinstance(space, dict) else ()):
        for bound in ("low", "high"):
            if isinstance(entry, dict) and isinstance(entry.get(bound), str):
                raise InputError(f"space.{name}.{bound}", f"space.{name}.{bound} must be a JSON number, got the "
                                                          f"string {entry[bound]!r}")
    params, recipe = body.get("params"), Recipe.objects.filter(name=body.get("recipe") or "").first()
    if isinstance(params, dict) and recipe is not None:
        numeric = {p["name"]: p["kind"] for p in recipe.definition["params"] if p["kind"] in ("integer", "float")}
        for name, value in params.items():
            if name in numeric and isinstance(value, str):
                raise InputError(f"params.{name}", f"params.{name} must be a JSON number (an {numeric[name]}), got "
                                                   f"the string {value!r}")


sweeps_api = methods(GET=_list, POST=_create)


@require_role("viewer")
def _detail(request, sweep_id):
    sweep = Sweep.objects.filter(pk=sweep_id).first()
    if sweep is None:
        return _missing(sweep_id)
    return JsonResponse(to_dict(sweep, figures.summary(sweep)))


sweep_api = methods(GET=_detail)


@require_role("operator")
def _stop(request, sweep_id):
    sweep = Sweep.objects.filter(pk=sweep_id).first()
    if sweep is None:
        return _missing(sweep_id)
    if not sweep.stop(by=request.user.username):
        return JsonResponse({"error": f"sweep {sweep.pk} has ended: it has no trial to stop and starts none",
                             "state": sweep.state}, status=409)
    sweep.refresh_from_db()
    return JsonResponse(to_dict(sweep))


@require_role("operator")
def _budget(request, sweep_id):
    """{"budget_usd": dollars}: lower it (operators) or raise it (admins)."""
    sweep = Sweep.objects.filter(pk=sweep_id).first()
    if sweep is None:
        return _missing(sweep_id)
    try:
        body = json_object(request.body)
        unknown = sorted(set(body) - {"budget_usd"})
        if unknown:
            raise InputError(unknown[0], f"unknown field {unknown[0]!r}; give budget_usd")
        sweep.set_budget(body.get("budget_usd"), request.user)
    except InputError as err:
        return bad(err.field, err.message)
    sweep.refresh_from_db()
    return JsonResponse(to_dict(sweep))


@require_role("operator")
def _again(request, sweep_id):
    sweep = Sweep.objects.filter(pk=sweep_id).first()
    if sweep is None:
        return _missing(sweep_id)
    try:
        new = sweep.again(request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(to_dict(new), status=201)


MORE_FIELDS = ("trials", "narrow_around", "space", "budget_usd")
REPEAT_FIELDS = ("top", "seeds", "budget_usd")


def _body_of(request, fields, numbers):
    body = json_object(request.body)
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise InputError(unknown[0], f"unknown field {unknown[0]!r}; give {', '.join(fields)}")
    for key in numbers:
        if isinstance(body.get(key), str):
            raise InputError(key, f"{key} must be a JSON number, got the string {body[key]!r}")
    return body


@require_role("operator")
def _more(request, sweep_id):
    """{"trials": N, "narrow_around": trial number | "space": {...}, "budget_usd"}: N more trials of the same
    study."""
    sweep = Sweep.objects.filter(pk=sweep_id).first()
    if sweep is None:
        return _missing(sweep_id)
    try:
        body = _body_of(request, MORE_FIELDS, ("trials", "narrow_around"))
        sweep.add_trials(request.user, body.get("trials"), body.get("narrow_around"), body.get("space"),
                         body.get("budget_usd"))
    except InputError as err:
        return bad(err.field, err.message)
    sweep.refresh_from_db()
    return JsonResponse(to_dict(sweep, figures.summary(sweep)))


@require_role("operator")
def _repeat(request, sweep_id):
    """{"top": K, "seeds": S, "budget_usd"}: the K best trials over S seeds in all."""
    sweep = Sweep.objects.filter(pk=sweep_id).first()
    if sweep is None:
        return _missing(sweep_id)
    try:
        body = _body_of(request, REPEAT_FIELDS, ("top", "seeds"))
        queued = sweep.repeat_top(request.user, body.get("top"), body.get("seeds"), body.get("budget_usd"))
    except InputError as err:
        return bad(err.field, err.message)
    sweep.refresh_from_db()
    return JsonResponse({**to_dict(sweep, figures.summary(sweep)), "queued": queued})


sweep_more_api = methods(POST=_more)
sweep_repeat_api = methods(POST=_repeat)
sweep_stop_api = methods(POST=_stop)
sweep_budget_api = methods(POST=_budget)
sweep_again_api = methods(POST=_again)


# -- CSV ---------------------------------------------------------------------------------------------------

CSV_COLUMNS = ("trial", "job_id", "name", "status", "params", "cost_usd", "score_points", "gain_points",
               "points_per_usd", "on_front", "stopped_by_sweep", "repeat_of", "seed")


def to_csv(sweep, s):
    """Per trial its figures, then a total row: money exact to the micro-dollar, names guarded against spreadsheet
    formulas as the cost review's CSV guards them."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_COLUMNS)

    def cell(v):
        return "" if v is None else str(v)

    for r in s["trials"]:
        out.writerow([r["number"], r["job_id"], csv_text(r["name"]), r["status"],
                      csv_text(json.dumps(r["params"], sort_keys=True)), cell(r["cost_usd"]), cell(r["score"]),
                      cell(r["gain_points"]), cell(r["points_per_usd"]), "yes" if r["on_front"] else "",
                      csv_text(r["stopped_by_sweep"]), cell(r["repeat_of"]), cell(r["seed"])])
    if s["setup"]:
        setup = s["setup"]
        out.writerow(["SETUP", setup["job_id"], csv_text(setup["recipe"]), setup["status"], "", cell(setup["cost_usd"]),
                      "", "", "", "", "", "", ""])
    out.writerow(["TOTAL", "", csv_text(sweep.name), sweep.state, "", s["spent_usd"], "", "", "", "", "", "", ""])
    return buf.getvalue()


@never_cache
@require_GET
@require_role("viewer")
def sweep_csv(request, sweep_id):
    sweep = Sweep.objects.filter(pk=sweep_id).first()
    if sweep is None:
        return _missing(sweep_id)
    resp = HttpResponse(to_csv(sweep, figures.summary(sweep)), content_type="text/csv; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="sweep-{sweep.pk}.csv"'
    return resp


# -- pages -------------------------------------------------------------------------------------------------


def _recipes():
    """The recipes a sweep can search: not an evaluation recipe, none that continues another job, none that is
    another's shared setup."""
    recipes = list(Recipe.objects.all())
    setups = {r.definition.get("setup") for r in recipes}
    return [r for r in recipes if not evaluates(r.definition) and not names_init_from(r.definition)
            and r.name not in setups]


@require_GET
@require_role("viewer")
def sweeps_page(request):
    sweeps = list(Sweep.objects.select_related("created_by")[:200])
    spent = figures.spent(sweeps)
    rows = [(s, {"spent_usd": spent[s.pk][0], "started": spent[s.pk][1]}) for s in sweeps]
    recipes = _recipes()
    # A refused form comes back open, with what was sent (the recipe chosen included).
    prefill = {k: request.GET.get(k, "")[:4000] for k in FORM_FIELDS}
    hidden = {k: request.GET[k][:400] for k in HIDDEN_FIELDS if request.GET.get(k)}
    return render(request, "sweeps/sweeps.html", {
        "rows": rows, "recipes": recipes, "objectives": search.OBJECTIVES, "space_max": SPACE_MAX,
        "parallel_default": PARALLEL_DEFAULT, "trials_default": TRIALS_DEFAULT, "prefill": prefill, "hidden": hidden,
        "prefilled": any(prefill.values()),
        "recipe_params": script_json({r.name: r.definition["params"] for r in recipes}),
        "recipe_costs": script_json(recipe_costs([r.name for r in recipes]))})


# How many of a recipe's newest completed jobs the form's estimate of a trial's cost averages.
COST_SAMPLE = 10


def recipe_costs(names):
    """{recipe: {"mean_usd", "low_usd", "high_usd", "jobs"}}: what the newest COST_SAMPLE completed launched jobs of
    each recipe cost (exact dollar strings, unrounded means), the form's estimate of one trial before a budget is set;
    recipes with none are left out. An estimate, whatever values those jobs ran with, and labelled so."""
    out = {}
    for name in names:
        ids = list(Launch.objects.filter(recipe_name=name, job__status=Status.COMPLETED)
                   .order_by("-job__finished_at").values_list("job_id", flat=True)[:COST_SAMPLE])
        if not ids:
            continue
        money = jobs_money(ids)
        usd = [Decimal(money[i]["cost_usd"]) for i in ids if money[i]["cost_usd"] is not None]
        if usd:
            out[name] = {"mean_usd": exact_usd(sum(usd, Decimal(0)) / len(usd)), "low_usd": exact_usd(min(usd)),
                         "high_usd": exact_usd(max(usd)), "jobs": len(usd)}
    return out


FORM_FIELDS = ("name", "team", "recipe", "space", "params", "objective", "target_score", "budget_usd", "parallel",
               "max_trials", "seed", "priority")
# What a sweep's definition holds beyond the form's fields: carried, hidden, by a form filled in from a sweep (Run
# again), so the new sweep is the old one but for what the form shows.
HIDDEN_FIELDS = ("stop_share", "stop_min_trials", "defaults_first", "env", "node", "pool", "cluster")


def again_link(sweep):
    """The New sweep form filled in with `sweep`'s definition and the next seed: Run again, read before it spends."""
    definition = sweep.definition()
    values = {**definition, "name": f"{sweep.name} (again)", "seed": sweep.seed + 1,
              "space": json.dumps(definition["space"]), "params": json.dumps(definition["params"]),
              "defaults_first": "true" if sweep.defaults_first else "false"}
    query = {k: values[k] for k in FORM_FIELDS + HIDDEN_FIELDS if values.get(k) not in (None, "")}
    return "/sweeps?" + urlencode(query) + "#new-sweep"


@require_POST
@require_role("operator")
def create_sweep(request):
    """The list page's form: the space and the fixed parameters as JSON objects, the rest as fields."""
    post = request.POST
    try:
        raw = {k: post.get(k, "") for k in FIELDS if k not in ("space", "params")}
        raw["space"] = form_json_object("space", post.get("space", ""), SPACE_EXAMPLE)
        raw["params"] = form_json_object("params", post.get("params", ""), '{"steps": 100}')
        _json_numbers({"recipe": raw.get("recipe"), "space": raw["space"], "params": raw["params"]})
        sweep = Sweep.create(created_by=request.user, **{k: v for k, v in raw.items() if v not in ("", None)})
    except InputError as err:
        messages.error(request, f"Sweep not created: {err.message}.")
        typed = {k: post[k][:4000] for k in FORM_FIELDS + HIDDEN_FIELDS if post.get(k)}
        return redirect(f"{reverse('sweeps')}?{urlencode(typed)}#new-sweep")
    messages.success(request, f"Sweep {sweep.pk} {sweep.name!r} created: {sweep.trials.count()} trial(s) started.")
    return redirect("sweep", sweep_id=sweep.pk)


@require_GET
@require_role("viewer")
def sweep_page(request, sweep_id):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    s = figures.summary(sweep)
    live = request.GET.get("live", "1") != "0"
    by_number = {r["number"]: r for r in s["trials"]}
    best = {k: by_number.get(v) for k, v in s["best"].items()}
    taking = continuations(sweep.recipe_name, {**sweep.params, **{d.name: None for d in sweep.dimensions}})
    following = taking[0].name if taking else None
    context = {"sweep": sweep, "s": s, "best": best, "figures_json": script_json(charts.sweep_charts(s)),
               "live": live, "topics": f"sweep.{sweep.pk},jobs,costs" if live else "",
               "campaign_links": {n: _campaign_link(sweep, r, following) for n, r in by_number.items()},
               "again_link": again_link(sweep),
               "more": {k: request.GET.get(k, "")[:100] for k in MORE_FORM},
               "narrow_default": best["per_dollar"]["number"] if best.get("per_dollar") else (
                   best["score"]["number"] if best.get("score") else ""),
               "can_repeat": _has_seed(sweep),
               "example_note": EXAMPLE_PRICES_NOTE}
    template = "sweeps/_body.html" if request.GET.get("part") == "body" else "sweeps/sweep.html"
    return render(request, template, context)


def _has_seed(sweep):
    recipe = Recipe.objects.filter(name=sweep.recipe_name).first()
    return bool(recipe) and any(p["name"] == SEED_PARAM and p["kind"] == "integer" for p in recipe.definition["params"])


def _campaign_link(sweep, row, following=None):
    """The campaigns page's New campaign form, filled in with this trial's recipe and parameter values, and the
    recipe its next runs take (`following`: the first of campaigns.models.continuations, when there is one)."""
    query = {"run_recipe": sweep.recipe_name, "run_params": json.dumps({**sweep.params, **row["params"]}),
             "team": sweep.team, "name": f"{sweep.name} · trial {row['number']}"}
    if following:
        query["continue_recipe"] = following
    return "/campaigns?" + urlencode(query) + "#new-campaign"


@require_POST
@require_role("operator")
def stop_sweep(request, sweep_id):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    if sweep.stop(by=request.user.username):
        messages.success(request, f"Sweep {sweep.pk} starts no more trials; its running trials are stopping.")
    else:
        messages.error(request, f"Sweep {sweep.pk} has ended: it has no trial to stop.")
    return redirect("sweep", sweep_id=sweep.pk)


@require_POST
@require_role("operator")
def sweep_budget(request, sweep_id):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    try:
        sweep.set_budget(request.POST.get("budget_usd", "").strip() or None, request.user)
    except InputError as err:
        messages.error(request, f"Budget not changed: {err.message}.")
        return redirect("sweep", sweep_id=sweep.pk)
    sweep.refresh_from_db()
    messages.success(request, f"Sweep {sweep.pk}'s budget is now ${sweep.budget_usd.normalize():f}"
                              f"{'; it is running again' if sweep.state == State.RUNNING else ''}.")
    return redirect("sweep", sweep_id=sweep.pk)


@require_POST
@require_role("operator")
def sweep_more(request, sweep_id):
    """The sweep page's More trials form: N more trials, the space as it is or narrowed around a trial."""
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    post = request.POST
    narrow = post.get("narrow_around", "").strip() if post.get("how") == "narrow" else None
    try:
        what = sweep.add_trials(request.user, post.get("trials", "").strip() or None, narrow,
                                budget=post.get("budget_usd", "").strip() or None)
    except InputError as err:
        messages.error(request, f"No trials added: {err.message}.")
        return redirect(f"{reverse('sweep', args=[sweep.pk])}?{urlencode(_typed(post))}#more-trials")
    sweep.refresh_from_db()
    messages.success(request, f"Sweep {sweep.pk}: {what}; {sweep.max_trials} trials in all now.")
    return redirect("sweep", sweep_id=sweep.pk)


@require_POST
@require_role("operator")
def sweep_repeat(request, sweep_id):
    """The sweep page's Re-run the top K form."""
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    post = request.POST
    try:
        queued = sweep.repeat_top(request.user, post.get("top", "").strip() or None,
                                  post.get("seeds", "").strip() or None, post.get("budget_usd", "").strip() or None)
    except InputError as err:
        messages.error(request, f"Nothing re-run: {err.message}.")
        return redirect(f"{reverse('sweep', args=[sweep.pk])}?{urlencode(_typed(post))}#more-trials")
    messages.success(request, f"Sweep {sweep.pk}: {queued} trial(s) queued to re-run its best over other seeds.")
    return redirect("sweep", sweep_id=sweep.pk)


MORE_FORM = ("trials", "how", "narrow_around", "top", "seeds", "budget_usd")


def _typed(post):
    """What the More trials forms sent, to fill them again when refused."""
    return {k: post[k][:100] for k in MORE_FORM if post.get(k)}


@require_POST
@require_role("operator")
def sweep_again(request, sweep_id):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    try:
        new = sweep.again(request.user)
    except InputError as err:
        messages.error(request, f"Not run again: {err.message}.")
        return redirect("sweep", sweep_id=sweep.pk)
    messages.success(request, f"Sweep {new.pk} runs sweep {sweep.pk} again with seed {new.seed}.")
    return redirect("sweep", sweep_id=new.pk)

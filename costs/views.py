"""The costs JSON/CSV API: each view parses its input and makes one call into costs.report or costs.intelligence.

GET /api/costs?from=&to=&group=team|job|node|day[&format=csv] → the cost table (viewer role).
GET /api/costs/jobs/<id> → a job's intelligence per dollar and its score-vs-dollars curve.
GET /api/costs/jobs/<id>/what-if?model=&speedup= → the job re-priced on another device model (an estimate).
Bad parameters → 400 {"error": ..., "param": ...}.
"""

from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from costs import report, tokens
from costs.intelligence import job_intelligence, score_cost_curve
from trainer.models import Job
from yardstick.auth import require_role
from yardstick.inputs import InputError


@never_cache
@require_GET
@require_role("viewer")
def costs(request):
    try:
        period, group, fmt = report.parse_params(request.GET)
    except InputError as err:
        return JsonResponse({"error": err.message, "param": err.field}, status=400)
    table = report.build(period, group)
    if fmt == "csv":
        resp = HttpResponse(report.to_csv(table), content_type="text/csv; charset=utf-8")
        name = f"costs-{group}-{period.start:%Y%m%d}-{period.end:%Y%m%d}.csv"
        resp["Content-Disposition"] = f'attachment; filename="{name}"'
        return resp
    return JsonResponse(report.to_json(table))


@never_cache
@require_GET
@require_role("viewer")
def job_costs(request, job_id):
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return JsonResponse({"error": f"no job {job_id}"}, status=404)
    return JsonResponse({**job_intelligence(job), "curve": score_cost_curve(job)})


@never_cache
@require_GET
@require_role("viewer")
def job_what_if(request, job_id):
    """The job re-priced on `model`, with a typed `speedup` or the one measured on its environment."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return JsonResponse({"error": f"no job {job_id}"}, status=404)
    try:
        model, speedup = tokens.what_if_input(request.GET)
    except InputError as err:
        return JsonResponse({"error": err.message, "param": err.field}, status=400)
    answer = tokens.what_if(job, model, speedup)
    if "error" in answer:
        return JsonResponse(answer, status=400)
    return JsonResponse(answer)

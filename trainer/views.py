"""The jobs JSON API: each view parses its input and makes one call into trainer.models.

Viewers read; operators (and admins) start, stop and resume. Errors are
`{"error": message}`, plus `"field"` for bad input (400) and `"status"` for a
job in the wrong state (409).
"""

from django.http import JsonResponse

from trainer import queue
from trainer.inputs import status_filter
from trainer.models import CONTROLS, Job, Sample, Step, TeamCap
from trainer.workers import live_workers, with_devices
from yardstick.auth import require_role
from yardstick.http import bad, int_param, methods
from yardstick.inputs import InputError, json_object

LIST_LIMIT = 100
LIST_LIMIT_MAX = 500
STEPS_LIMIT = 1000
STEPS_LIMIT_MAX = 5000


def _missing(job_id):
    return JsonResponse({"error": f"no job {job_id}"}, status=404)


# -- /api/jobs ------------------------------------------------------------------------


@require_role("viewer")
def list_jobs(request):
    """Jobs, newest first: ?status=, ?team=, ?limit= (default 100)."""
    try:
        limit = int_param(request, "limit", LIST_LIMIT, 1, LIST_LIMIT_MAX)
        status = status_filter(request.GET.get("status"))
    except InputError as err:
        return bad(err.field, err.message)
    jobs = Job.objects.select_related("created_by")
    if status:
        jobs = jobs.filter(status=status)
    if request.GET.get("team"):
        jobs = jobs.filter(team=request.GET["team"])
    return JsonResponse({"jobs": [job.to_dict() for job in jobs[:limit]]})


@require_role("operator")
def create_job(request):
    """Start a job from {name, team, env, config: {...}, budget_usd, device, devices, node, pool, init_from,
    init_step, stop_loss, priority}; 201 with the job. init_from (a job id) continues that job's policy from its
    checkpoint at init_step (default: its final one) instead of the base policy. devices (default 1), node and pool
    say where it may run: a job no live jobs worker can run is refused (400) naming what they have; one on GPUs waits
    in the line (trainer/queue.py) by its priority while they are busy."""
    try:
        body = json_object(request.body)
    except InputError as err:
        return bad(err.field, err.message)
    accepted = ("name", "team", "env", "config", "budget_usd", "device", "devices", "node", "pool", "init_from",
                "init_step", "stop_loss", "priority")
    unknown = sorted(set(body) - set(accepted))
    if unknown:
        return bad(unknown[0], f"unknown field {unknown[0]!r}; accepted fields are {', '.join(accepted)}")
    try:
        job = Job.start(
            name=body.get("name"), team=body.get("team"), env=body.get("env"), config=body.get("config"),
            budget_usd=body.get("budget_usd"), device=body.get("device", "auto"), devices=body.get("devices", 1),
            node=body.get("node", ""), pool=body.get("pool", ""), created_by=request.user,
            init_from=body.get("init_from"), init_step=body.get("init_step"), stop_loss=body.get("stop_loss"),
            priority=body.get("priority", "normal"),
        )
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(job.to_dict(detail=True), status=201)


jobs = methods(GET=list_jobs, POST=create_job)


# -- /api/jobs/<id> ---------------------------------------------------------------------

# What apps above trainer add to a job's detail, {key: callable(job) -> value}, registered from their ready()
# without trainer importing them: costs adds "money", the job's cost and IPD as every page shows them.
DETAIL_PARTS = {}


def add_detail_part(key, part):
    """Give /api/jobs/<id> the key `key`, valued `part(job)`."""
    DETAIL_PARTS[key] = part


@require_role("viewer")
def _job_detail(request, job_id):
    job = Job.objects.select_related("created_by").filter(pk=job_id).first()
    if job is None:
        return _missing(job_id)
    parts = {name: part(job) for name, part in DETAIL_PARTS.items()}
    return JsonResponse({**job.to_dict(detail=True), **parts})


job_detail = methods(GET=_job_detail)


# -- /api/jobs/<id>/stop-loss -------------------------------------------------------------------


@require_role("operator")
def _put_stop_loss(request, job_id):
    """Set the job's stop-loss (trainer/stoploss.py; {} removes it): the job with it, or 400 naming the field."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return _missing(job_id)
    try:
        job.set_stop_loss(json_object(request.body))
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(job.to_dict())


@require_role("operator")
def _delete_stop_loss(request, job_id):
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return _missing(job_id)
    job.set_stop_loss(None)
    return JsonResponse(job.to_dict())


stop_loss = methods(PUT=_put_stop_loss, DELETE=_delete_stop_loss)


def _control(action):
    """POST /api/jobs/<id>/<action>: the job after the action, or 409 with the model's refusal (CONTROLS)."""
    act, refusal = CONTROLS[action]

    @require_role("operator")
    def view(request, job_id):
        job = Job.objects.filter(pk=job_id).first()
        if job is None:
            return _missing(job_id)
        if not act(job, by=request.user.username):
            return JsonResponse({"error": refusal(job), "status": job.status}, status=409)
        return JsonResponse(job.to_dict())

    return view


stop_job = methods(POST=_control("stop"))
resume_job = methods(POST=_control("resume"))


@require_role("viewer")
def _steps(request, job_id):
    """Step rows after ?after= (default: all, from the baseline at step 0), oldest first."""
    job = Job.objects.filter(pk=job_id).only("id", "status", "phase", "steps_done", "source",
                                             "not_resumable_reason").first()
    if job is None:
        return _missing(job_id)
    try:
        after = int_param(request, "after", -1, minimum=-1)
        limit = int_param(request, "limit", STEPS_LIMIT, 1, STEPS_LIMIT_MAX)
    except InputError as err:
        return bad(err.field, err.message)
    rows = list(Step.objects.filter(job_id=job_id, step__gt=after).order_by("step")[:limit])
    return JsonResponse({
        "job": job.pk, "status": job.status, "phase": job.phase, "steps_done": job.steps_done,
        # The controls the job offers now (Job.can_stop / can_resume), for a page catching up.
        "can_stop": job.can_stop, "can_resume": job.can_resume,
        "steps": [row.to_dict() for row in rows],
        "next_after": rows[-1].step if rows else after,
    })


job_steps = methods(GET=_steps)


@require_role("viewer")
def _samples(request, job_id):
    """The rollouts kept at ?step= (default: the newest step that has any)."""
    if not Job.objects.filter(pk=job_id).exists():
        return _missing(job_id)
    try:
        step = int_param(request, "step", None, minimum=0)
    except InputError as err:
        return bad(err.field, err.message)
    if step is None:
        step = Sample.objects.filter(job_id=job_id).order_by("-step").values_list("step", flat=True).first()
    rows = Sample.objects.filter(job_id=job_id, step=step) if step is not None else Sample.objects.none()
    return JsonResponse({"job": job_id, "step": step, "samples": [s.to_dict() for s in rows]})


job_samples = methods(GET=_samples)


# -- /api/workers -------------------------------------------------------------------------


@require_role("viewer")
def _workers(request):
    """The live jobs and launch workers: what each has (node, pool, cores, GPUs, devices), what the jobs there hold
    and what is free: where a job can go."""
    return JsonResponse({"workers": [with_devices(w) for w in live_workers()]})


workers = methods(GET=_workers)


# -- /api/queue, /api/jobs/<id>/priority, /api/caps ----------------------------------------------------------


@require_role("viewer")
def _queue(request):
    """The line of jobs waiting for devices, per pool (trainer.queue.summary)."""
    return JsonResponse(queue.summary())


queue_api = methods(GET=_queue)


@require_role("operator")
def _priority(request, job_id):
    """Change a waiting job's priority: {"priority": "low" | "normal" | "high"} (high: admins); the job with its new
    place, 400 naming the field, or 409 for a job that no longer waits."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return _missing(job_id)
    try:
        body = json_object(request.body)
        if set(body) != {"priority"}:
            raise InputError("priority", "give {\"priority\": \"low\" | \"normal\" | \"high\"} and nothing else")
        if not job.in_line:
            return JsonResponse({"error": f"job {job.pk} is {job.status}, not waiting in line: only a waiting job's "
                                          "priority can change", "status": job.status}, status=409)
        queue.set_priority(job, body["priority"], by=request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(job.to_dict())


priority = methods(POST=_priority)


@require_role("viewer")
def _caps(request):
    return JsonResponse({"caps": [cap.to_dict() for cap in TeamCap.objects.all()]})


@require_role("admin")
def _put_cap(request):
    """Set a team's cap: {"team", "kind": "cuda" | "cpu", "devices": N, or null to remove it}; the caps after it."""
    try:
        body = json_object(request.body)
        unknown = sorted(set(body) - {"team", "kind", "devices"})
        if unknown:
            raise InputError(unknown[0], f"unknown field {unknown[0]!r}; accepted fields are team, kind, devices")
        if "devices" not in body:
            raise InputError("devices", "devices is required: a whole number, or null to remove the cap")
        queue.set_cap(body.get("team"), body.get("kind", "cuda"), body["devices"], by=request.user.username)
    except InputError as err:
        return bad(err.field, err.message)
    return _caps(request)


caps = methods(GET=_caps, PUT=_put_cap)

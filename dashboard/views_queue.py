"""The line of jobs waiting for devices, on the pages: the Jobs page's queue panel (rendered here so a live page
swaps it in when the line moves), a waiting job's priority, and the team caps admins set. Small form views calling
the same model methods as the JSON API (trainer/views.py: /api/queue, /api/jobs/<id>/priority, /api/caps)."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from trainer import queue
from trainer.models import Job, Priority, TeamCap
from yardstick.auth import has_role, require_role
from yardstick.inputs import InputError


def panel_context(request):
    """What the queue panel shows (trainer.queue.summary) and whether its reader may set caps."""
    return {"queue": queue.summary(), "can_cap": has_role(request.user, "admin")}


@never_cache
@require_GET
@require_role("viewer")
def queue_panel(request):
    return render(request, "dashboard/_queue_panel.html", panel_context(request))


def priorities(user):
    """The priorities `user` may give a job: high for admins only."""
    return [p.label for p in Priority if p != Priority.HIGH or has_role(user, "admin")]


@require_POST
@require_role("operator")
def set_priority(request, job_id):
    job = get_object_or_404(Job, pk=job_id)
    try:
        queue.set_priority(job, request.POST.get("priority", ""), by=request.user)
    except InputError as err:
        messages.error(request, f"Priority not changed: {err.message}.")
    else:
        messages.success(request, f"Job {job.pk} is now {job.get_priority_display()} priority: "
                                  + (f"{job.waiting_for}." if job.in_line else "it has started."))
    return redirect("job", job_id=job.pk)


@require_POST
@require_role("admin")
def set_cap(request):
    data = request.POST
    try:
        cap = queue.set_cap(data.get("team", ""), data.get("kind", "cuda"), data.get("devices", ""),
                            by=request.user.username)
    except InputError as err:
        messages.error(request, f"Cap not set: {err.message}.")
    else:
        team = data.get("team", "").strip()
        messages.success(request, f"Team {team} may now hold at most {cap.devices} {TeamCap.KINDS[cap.kind]} at once."
                         if cap else f"Team {team} has no cap now.")
    return redirect("/jobs#queue")

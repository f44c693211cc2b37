"""An operator binds an external run to devices from its job page (a run started without yardstick-mlflow)."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from tracking import matching
from tracking.models import Run
from yardstick.auth import require_role


@require_POST
@require_role("operator")
def bind_run(request, job_id):
    run = get_object_or_404(Run.objects.select_related("job"), job_id=job_id)
    node = request.POST.get("node", "")
    try:
        created = matching.bind(run, node, request.POST.getlist("device"), by=request.user.username)
    except ValueError as err:
        messages.error(request, f"Not bound: {err}.")
    else:
        names = ", ".join(s.device_name or s.device for s in created) or "nothing new (already bound)"
        messages.success(request, f"Job {job_id} bound to {names} on {node}.")
    return redirect("job", job_id=job_id)

"""Where the MLflow client's links land: it prints `<tracking URI>/#/experiments/<id>/runs/<run id>`
after every run ("View run ... at"), a path of MLflow's own UI. The fragment never reaches the server;
static/yardstick/links.js sends it here, and this sends the reader to the run's job page."""

from urllib.parse import urlencode

from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET

from tracking.models import Experiment, Run
from yardstick.auth import require_role


@require_GET
@require_role("viewer")
def run_page(request, run_id):
    run = get_object_or_404(Run, run_id=run_id)
    return redirect("job", job_id=run.job_id)


@require_GET
@require_role("viewer")
def experiment_page(request, experiment_id):
    """An experiment's runs are its jobs: the Jobs list of its environment (there is no page per experiment)."""
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    return redirect(f"{reverse('jobs')}?{urlencode({'env': experiment.name})}")

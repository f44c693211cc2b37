"""The MLflow-compatible tracking API at MLflow's paths (the client builds them from MLFLOW_TRACKING_URI).

Each endpoint answers at /api/2.0/mlflow/... and at /ajax-api/2.0/mlflow/... as
MLflow's server does. Any other path under the MLflow prefixes answers MLflow's
JSON ENDPOINT_NOT_FOUND (the client falls back or reports it), never an HTML 404:
MLflow 3 clients call `logged-models` when a model is logged, for instance.
"""

from django.urls import path, re_path

from tracking import api, views_artifacts, views_bind, views_links

ENDPOINTS = {
    "experiments/create": api.create_experiment,
    "experiments/get": api.get_experiment,
    "experiments/get-by-name": api.get_experiment_by_name,
    "experiments/search": api.search_experiments,
    "experiments/update": api.update_experiment,
    "experiments/delete": api.delete_experiment,
    "experiments/restore": api.restore_experiment,
    "experiments/set-experiment-tag": api.set_experiment_tag,
    "experiments/delete-experiment-tag": api.delete_experiment_tag,
    "runs/create": api.create_run,
    "runs/get": api.get_run,
    "runs/update": api.update_run,
    "runs/delete": api.delete_run,
    "runs/restore": api.restore_run,
    "runs/search": api.search_runs,
    "runs/log-batch": api.log_batch,
    "runs/log-metric": api.log_metric,
    "runs/log-parameter": api.log_param,
    "runs/set-tag": api.set_tag,
    "runs/delete-tag": api.delete_tag,
    "runs/log-inputs": api.log_inputs,
    "metrics/get-history": api.get_metric_history,
    "logged-models/search": api.search_logged_models,
}

urlpatterns = [
    *(path(f"{prefix}2.0/mlflow/{endpoint}", view, name=f"mlflow-{endpoint.replace('/', '-')}"
           if prefix == "api/" else None)
      for endpoint, view in ENDPOINTS.items() for prefix in ("api/", "ajax-api/")),
    # MLflow's proxied artifact API (mlflow-artifacts: URIs); anything else under it is ENDPOINT_NOT_FOUND.
    path("api/2.0/mlflow-artifacts/artifacts", views_artifacts.listing, name="mlflow-artifacts-list"),
    path("api/2.0/mlflow-artifacts/artifacts/<path:path>", views_artifacts.artifact, name="mlflow-artifact"),
    re_path(r"^api/2\.0/mlflow-artifacts/", views_artifacts.not_found),
    path("jobs/<int:job_id>/bind", views_bind.bind_run, name="job-bind"),
    path("runs/<str:run_id>", views_links.run_page, name="run"),
    path("experiments/<int:experiment_id>", views_links.experiment_page, name="experiment"),
    re_path(r"^(?:api|ajax-api)/[0-9.]+/mlflow/", api.endpoint_not_found),  # no group: it would be an argument
]

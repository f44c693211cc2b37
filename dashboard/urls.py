from django.urls import path, register_converter
from django.urls.converters import PathConverter

from dashboard import views, views_clusters, views_hardware, views_launch


class NodeName(PathConverter):
    """A node's name: "/" inside it (an imported log's --node, a DCGM Hostname label), never at its end, where a
    trailing slash is the URL style's to redirect (yardstick.http.without_trailing_slash)."""

    regex = r".*[^/]"


register_converter(NodeName, "node")

urlpatterns = [
    path("", views.fleet_page, name="fleet"),
    path("fleet/nodes", views.fleet_nodes, name="fleet-nodes"),
    path("healthz", views.healthz, name="healthz"),
    path("api/whoami", views.whoami, name="whoami"),
    path("assets/plotly-<str:version>.min.js", views.plotly_js, name="plotly-js"),
    # <node:…>: a node's name may hold "/" (an imported log's --node, a DCGM Hostname label), and a
    # link to it must not fail the page that lists it. The owner route comes first to win its suffix.
    path("nodes/<node:name>/owner", views.set_node_owner, name="node-owner"),
    path("nodes/<node:name>", views.node_page, name="node"),
    path("jobs", views.jobs_page, name="jobs"),
    path("jobs/start", views.start_job, name="job-start"),
    path("jobs/<int:job_id>", views.job_page, name="job"),
    path("jobs/<int:job_id>/stop", views.stop_job, name="job-stop"),
    path("jobs/<int:job_id>/resume", views.resume_job, name="job-resume"),
    path("jobs/<int:job_id>/score-key", views.set_score_key, name="job-score-key"),
    path("jobs/<int:job_id>/stop-loss", views.set_stop_loss, name="job-stop-loss"),
    path("jobs/<int:job_id>/restart", views_launch.restart_job, name="job-restart"),
    path("jobs/<int:job_id>/part/<str:part>", views_launch.job_part, name="job-part"),
    path("recipes", views_launch.recipes_page, name="recipes"),
    path("recipes/<str:name>", views_launch.recipe_page, name="recipe"),
    path("clusters", views_clusters.clusters_page, name="clusters"),
    path("clusters/<str:name>/forget", views_clusters.forget_cluster, name="cluster-forget"),
    path("clusters/<str:name>", views_clusters.cluster_page, name="cluster"),
    path("compare", views.compare_page, name="compare"),
    path("costs", views.costs_page, name="costs"),
    path("hardware", views_hardware.hardware_page, name="hardware"),
]

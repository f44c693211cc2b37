from django.urls import path

from dashboard import views, views_clusters, views_hardware, views_launch, views_queue

urlpatterns = [
    path("", views.fleet_page, name="fleet"),
    path("fleet/nodes", views.fleet_nodes, name="fleet-nodes"),
    path("healthz", views.healthz, name="healthz"),
    path("api/whoami", views.whoami, name="whoami"),
    path("assets/plotly-<str:version>.min.js", views.plotly_js, name="plotly-js"),
    # <path:…>: a node's name may hold "/" (an imported log's --node, a DCGM Hostname label), even at its end,
    # and a link to it must not fail the page that lists it (node_page sends /nodes/x/ on to /nodes/x when there is
    # no node "x/"). The owner route comes first to win its suffix.
    path("nodes/<path:name>/owner", views.set_node_owner, name="node-owner"),
    path("nodes/<path:name>", views.node_page, name="node"),
    path("jobs", views.jobs_page, name="jobs"),
    path("jobs/start", views.start_job, name="job-start"),
    path("jobs/queue", views_queue.queue_panel, name="jobs-queue"),
    path("jobs/caps", views_queue.set_cap, name="jobs-cap"),
    path("jobs/<int:job_id>", views.job_page, name="job"),
    path("jobs/<int:job_id>/stop", views.stop_job, name="job-stop"),
    path("jobs/<int:job_id>/resume", views.resume_job, name="job-resume"),
    path("jobs/<int:job_id>/score-key", views.set_score_key, name="job-score-key"),
    path("jobs/<int:job_id>/stop-loss", views.set_stop_loss, name="job-stop-loss"),
    path("jobs/<int:job_id>/priority", views_queue.set_priority, name="job-priority"),
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

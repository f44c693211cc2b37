from django.urls import path

from launch import views

urlpatterns = [
    path("api/recipes", views.recipes_api, name="api-recipes"),
    path("api/recipes/export", views.export_api, name="api-recipes-export"),
    path("api/recipes/import", views.import_api, name="api-recipes-import"),
    path("api/recipes/<str:name>", views.recipe_api, name="api-recipe"),
    path("api/clusters", views.clusters_api, name="api-clusters"),
    path("api/clusters/<str:name>", views.cluster_api, name="api-cluster"),
    path("api/launch", views.launch_api, name="api-launch"),
    path("api/jobs/<int:job_id>/restart", views.restart_api, name="api-job-restart"),
    path("api/jobs/<int:job_id>/output", views.output_api, name="api-job-output"),
    path("api/jobs/<int:job_id>/output.txt", views.output_text, name="api-job-output-text"),
]

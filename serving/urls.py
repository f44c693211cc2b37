from django.urls import path

from serving import views

urlpatterns = [
    path("api/serving", views.serving_api, name="api-serving"),
    path("api/serving/<str:name>", views.deployment_api, name="api-deployment"),
    path("serving", views.serving_page, name="serving"),
    path("serving/register", views.register_deployment, name="deployment-register"),
    path("serving/<str:name>/delete", views.delete_deployment, name="deployment-delete"),
]

from django.urls import path

from dashboard import views

urlpatterns = [
    path("", views.fleet_page, name="fleet"),
    path("healthz", views.healthz, name="healthz"),
    path("api/whoami", views.whoami, name="whoami"),
]

from django.urls import path

from collector import views

urlpatterns = [
    path("api/fleet", views.fleet, name="api-fleet"),
    path("api/devices/<str:uuid>/samples", views.device_samples, name="api-device-samples"),
]

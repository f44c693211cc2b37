from django.urls import path

from exporter import views

urlpatterns = [
    path("metrics", views.metrics_view, name="metrics"),
]

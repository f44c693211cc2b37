"""The project's URLs plus collector.urls, until yardstick/urls.py includes them (harmless after)."""

from django.urls import include, path

urlpatterns = [
    path("", include("collector.urls")),
    path("", include("yardstick.urls")),
]

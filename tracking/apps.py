from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracking"
    verbose_name = "Tracking (MLflow-compatible API for outside training runs)"

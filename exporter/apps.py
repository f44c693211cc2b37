from django.apps import AppConfig


class ExporterConfig(AppConfig):
    name = "exporter"
    verbose_name = "Prometheus exporter"

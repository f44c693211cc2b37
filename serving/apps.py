from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "serving"
    verbose_name = "Serving (deployments of inference engines, priced per 1M tokens)"

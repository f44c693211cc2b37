from django.apps import AppConfig


class CostsConfig(AppConfig):
    name = "costs"

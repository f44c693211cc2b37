from django.apps import AppConfig


class LaunchConfig(AppConfig):
    name = "launch"
    verbose_name = "Launch (recipes of the runs Yardstick starts)"

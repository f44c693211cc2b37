from django.apps import AppConfig


class YardstickConfig(AppConfig):
    name = "yardstick"
    verbose_name = "Yardstick platform"

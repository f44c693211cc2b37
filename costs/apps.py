from django.apps import AppConfig


class CostsConfig(AppConfig):
    name = "costs"

    def ready(self):
        # Imported here: apps.py is loaded before the models it would reach are.
        from collector.signals import imported
        from costs.attribution import attribute_imported

        # An import of old telemetry is attributed at once (collector.signals says why).
        imported.connect(attribute_imported, dispatch_uid="costs.attribute_imported")

from django.apps import AppConfig


class CostsConfig(AppConfig):
    name = "costs"

    def ready(self):
        # here: apps.py is loaded before the models are
        from collector.signals import imported
        from costs.attribution import attribute_imported
        from costs.intelligence import job_money
        from costs.tokens import job_decomposition
        from trainer.views import add_detail_part

        # An import of old telemetry is attributed at once (collector.signals says why).
        imported.connect(attribute_imported, dispatch_uid="costs.attribute_imported")
        # /api/jobs/<id> carries the job's cost and IPD as every page shows them (/api/costs/jobs/<id> has the rest).
        add_detail_part("money", job_money)
        add_detail_part("price_of_a_point", job_decomposition)

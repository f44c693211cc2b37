from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracking"
    verbose_name = "Tracking (MLflow-compatible API for outside training runs)"

    def ready(self):
        # trainer never imports tracking: the external kind of run makes itself known to trainer's registry.
        from tracking.kind import EXTERNAL
        from trainer.kinds import register

        register(EXTERNAL)

from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "sweeps"

    def ready(self):
        # trainer never imports sweeps: a job's end (trainer.signals.devices_freed, after its commit) is when a
        # sweep whose trial it was takes its next pass.
        # here: apps.py is loaded before the models are
        from sweeps import models
        from trainer.signals import devices_freed

        devices_freed.connect(models.on_job_ended, dispatch_uid="sweeps.on_job_ended")
        # The cost review shows a sweep's spend as one line with its trials underneath.
        from dashboard.cards import add_cost_review_card
        from sweeps.figures import cost_review

        add_cost_review_card("sweeps/_review.html", cost_review)
        # The `sweep` alert kind: a sweep ended, stalled, or two of its trials failed.
        from sweeps import notices

        notices.register()

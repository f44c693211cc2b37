from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    name = "campaigns"

    def ready(self):
        # trainer never imports campaigns: it announces a run's end (trainer.signals.run_ended) and the
        # creation of a job (post_save); campaigns listens to both.
        from django.db.models.signals import post_save

        # here: apps.py is loaded before the models are
        from campaigns import models
        from trainer.models import Job
        from trainer.signals import run_ended

        run_ended.connect(models.on_run_ended, dispatch_uid="campaigns.on_run_ended")
        post_save.connect(models.on_job_created, sender=Job, dispatch_uid="campaigns.on_job_created")

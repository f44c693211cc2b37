import warnings

from django.apps import AppConfig


class TrainerConfig(AppConfig):
    name = "trainer"

    def ready(self):
        # PyTorch announces at import that NumPy is absent; nothing here hands tensors to NumPy.
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        # The kind of run trainer itself trains; other apps register theirs from their own ready().
        from trainer.kinds import register
        from trainer.kinds.embedded import EMBEDDED

        register(EMBEDDED)
        # The line of waiting jobs moves when a job ends and frees what it held.
        from trainer import queue
        from trainer.signals import devices_freed

        devices_freed.connect(queue.on_devices_freed, dispatch_uid="trainer.queue")

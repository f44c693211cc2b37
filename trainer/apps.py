import warnings

from django.apps import AppConfig


class TrainerConfig(AppConfig):
    name = "trainer"

    def ready(self):
        # PyTorch announces at import that NumPy is absent; nothing here hands tensors to NumPy.
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")

app = Celery("yardstick")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["yardstick", "collector", "trainer", "costs", "dashboard", "tracking", "campaigns", "alerts"])

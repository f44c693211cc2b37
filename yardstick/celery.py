import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")

app = Celery("yardstick")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Every installed app's tasks module, read from INSTALLED_APPS once Django is set up (a new app cannot be missed).
app.autodiscover_tasks()

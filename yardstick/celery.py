import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")

# A worker run as root (a container's, a lone GPU box's usual user) gets a block of advice on every
# start. The risk it names is pickle: with pickle accepted Celery refuses root outright (SecurityError,
# not silenced here), and Yardstick's workers accept JSON only (Celery's default accept_content).
warnings.filterwarnings("ignore", message="You're running the worker with superuser privileges",
                        category=SecurityWarning)

app = Celery("yardstick")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Every installed app's tasks module, read from INSTALLED_APPS once Django is set up (a new app cannot be missed).
app.autodiscover_tasks()

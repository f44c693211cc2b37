import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import beat_init

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


@beat_init.connect
def _tick_at_start(sender, **kwargs):
    """Beat runs an interval's task first one interval after it starts: its heartbeat (beat-tick, which /healthz
    reads and `up` waits for before it says ready) goes out at once instead, ten seconds sooner."""
    app.send_task("yardstick.tasks.beat_tick")

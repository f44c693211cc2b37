import os
import threading
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import beat_init, worker_shutting_down

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


# Set in a worker's process once its warm shutdown begins (`up` stopping, a deploy). The process finishes what it runs
# (its jobs stop at a checkpoint) and starts nothing new: no sweep trial, no placement of a waiting job. A message it
# sent now could go to a worker that is also going away and be held, unacknowledged, by a process that never runs it;
# its next start, or a process that is not stopping, takes those passes instead.
_shutting_down = threading.Event()


@worker_shutting_down.connect
def _start_no_more_work(**kwargs):
    start_no_more_work()


def start_no_more_work():
    """From now on this process starts no work (a worker's warm shutdown; a launch guard cleaning up after its dead
    worker, which a stopping `up` may have killed)."""
    _shutting_down.set()


def shutting_down():
    """True in a Celery worker process that has begun its warm shutdown (or a process that said so)."""
    return _shutting_down.is_set()

from celery import shared_task

from yardstick.models import Heartbeat


@shared_task(name="yardstick.tasks.beat_tick")
def beat_tick():
    """Run by beat every few seconds; /healthz reads its age to tell that beat is alive."""
    Heartbeat.beat("beat")

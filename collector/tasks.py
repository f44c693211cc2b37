"""Periodic upkeep of the telemetry store; each task makes one call into collector.store."""

from celery import shared_task

from collector import store

# Merged by the lead into settings.CELERY_BEAT_SCHEDULE.
BEAT_SCHEDULE = {
    "collector-roll-up": {"task": "collector.tasks.roll_up", "schedule": 60.0},
    "collector-create-partitions": {"task": "collector.tasks.create_partitions", "schedule": 3600.0},
    "collector-apply-retention": {"task": "collector.tasks.apply_retention", "schedule": 6 * 3600.0},
}


@shared_task
def roll_up():
    return store.roll_up()


@shared_task
def create_partitions():
    return store.create_partitions()


@shared_task
def apply_retention():
    return store.apply_retention()

"""Periodic upkeep of the telemetry store; each task makes one call into collector.store."""

from celery import shared_task

from collector import store

# Beat runs them on settings.CELERY_BEAT_SCHEDULE, the one schedule.


@shared_task
def roll_up():
    return store.roll_up()


@shared_task
def create_partitions():
    return store.create_partitions()


@shared_task
def apply_retention():
    return store.apply_retention()

"""Celery entry point for the exporter: keep what a scrape would compute in the shared cache."""

from celery import shared_task

from exporter.metrics import warm as warm_cache


@shared_task(name="exporter.tasks.warm", ignore_result=True)
def warm():
    """The teams' spend today and the exported jobs' money, computed now and kept for the next scrapes."""
    return {"jobs": warm_cache()}

"""The beat runs the evaluation and the deliveries: its schedule names the registered tasks, and one evaluate
task both fires and sends."""

from django.conf import settings

from alerts import tasks
from alerts.models import Alert, Channel, Delivery
from tests.alerts.receiver import Receiver
from tests.dashboard import builders as b
from yardstick.celery import app


def test_the_beat_schedule_names_the_alert_tasks_and_evaluate_fires_and_sends(rule):
    scheduled = {e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"alerts.tasks.evaluate", "alerts.tasks.deliver"} <= scheduled & set(app.tasks)

    with Receiver() as receiver:
        rule("job_failed", channels=[Channel.create(name="hook", kind="webhook", target=receiver.url + "/")])
        job = b.job(status="failed")
        summary = tasks.evaluate()
        assert summary["fired"] == [Alert.objects.get().pk] and summary["sent"]["delivered"] == 1
        assert receiver.bodies("/")[0]["alert"]["subject"] == f"job:{job.pk}"
        assert Delivery.objects.get().state == "delivered"
        assert tasks.deliver() == {"delivered": 0, "failed": 0, "cancelled": 0}

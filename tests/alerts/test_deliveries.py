"""Notifications reach a real HTTP receiver (generic JSON and Slack's {"text"}) and Django's mail outbox; a failed
delivery is retried after its back-off, and acknowledged or silenced alerts send nothing more."""

import socket
from datetime import timedelta

import pytest
from django.core import mail

from alerts import delivery
from alerts.delivery import backoff_s, send_due
from alerts.evaluate import evaluate
from alerts.models import Alert, Channel, Delivery
from tests.alerts.conftest import T0
from tests.alerts.receiver import Receiver
from tests.dashboard import builders as b
from trainer.models import Job


@pytest.fixture
def receiver():
    with Receiver() as r:
        yield r


def test_a_webhook_that_fails_is_retried_after_its_back_off_and_slack_and_email_get_theirs(rule, receiver):
    hook = Channel.create(name="ops hook", kind="webhook", target=receiver.url + "/hook")
    slack = Channel.create(name="ops slack", kind="slack", target=receiver.url + "/slack")
    email = Channel.create(name="ops mail", kind="email", target="oncall@example.com, lead@example.com")
    failed_rule = rule("job_failed", channels=[hook, slack, email], name="jobs that fail")
    job = b.job(name="doomed", status="failed")
    receiver.answers["/hook"] = [500, 200]

    evaluate(now=T0)
    assert send_due(now=T0) == {"delivered": 2, "failed": 1, "cancelled": 0}
    failed = Delivery.objects.get(channel=hook)
    assert (failed.state, failed.attempts, failed.last_error) == ("pending", 1, "HTTP 500 Internal Server Error")
    assert failed.next_attempt_at == T0 + timedelta(seconds=30)

    assert send_due(now=T0 + timedelta(seconds=29)) == {"delivered": 0, "failed": 0, "cancelled": 0}
    assert send_due(now=T0 + timedelta(seconds=30))["delivered"] == 1
    failed.refresh_from_db()
    assert (failed.state, failed.attempts, failed.last_error) == ("delivered", 2, "")
    assert failed.delivered_at == T0 + timedelta(seconds=30)

    first, retry = receiver.bodies("/hook")
    assert first == retry
    assert first["event"] == "fired" and first["alert"]["subject"] == f"job:{job.pk}"
    assert first["rule"] == {"id": failed_rule.pk, "name": "jobs that fail", "kind": "job_failed",
                             "threshold": None, "duration": 0, "scope": ""}
    assert all(ct == "application/json" for _, _, ct in receiver.received)
    assert receiver.bodies("/slack") == [{"text": f"[FIRING] jobs that fail: job {job.pk} 'doomed' (research) failed"}]
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["oncall@example.com", "lead@example.com"]
    assert mail.outbox[0].subject == f"[FIRING] jobs that fail: job {job.pk} 'doomed' (research) failed"

    Job.objects.filter(pk=job.pk).update(status="queued")  # resumed: resolved, and that is sent too
    evaluate(now=T0 + timedelta(minutes=1))
    send_due(now=T0 + timedelta(minutes=1))
    assert receiver.bodies("/hook")[-1]["event"] == "resolved"
    assert receiver.bodies("/slack")[-1]["text"].startswith("[RESOLVED] jobs that fail")
    assert len(mail.outbox) == 2


def test_back_off_doubles_from_30_seconds_to_a_cap_and_a_delivery_is_given_up_after_its_attempts(rule):
    assert [backoff_s(n) for n in (1, 2, 3, 4, 7, 20)] == [30, 60, 120, 240, 1800, 1800]
    with socket.socket() as s:  # a port nothing listens on: connection refused
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    hook = Channel.create(name="gone", kind="webhook", target=f"http://127.0.0.1:{closed}/hook")
    rule("job_failed", channels=[hook])
    b.job(status="failed")
    evaluate(now=T0)
    now = T0
    for attempt in range(1, delivery.MAX_ATTEMPTS + 1):
        assert send_due(now=now)["failed"] == 1
        d = Delivery.objects.get()
        assert d.attempts == attempt and "Connection refused" in d.last_error
        if attempt < delivery.MAX_ATTEMPTS:
            assert d.next_attempt_at == now + timedelta(seconds=backoff_s(attempt))
            now = d.next_attempt_at
    assert (d.state, d.next_attempt_at) == ("failed", None)
    assert send_due(now=now + timedelta(days=1))["failed"] == 0, "given up: not tried again"


def test_an_acknowledged_alert_sends_nothing_more_and_a_silence_carries_to_its_next_firing(rule, receiver,
                                                                                           operator):
    hook = Channel.create(name="hook", kind="webhook", target=receiver.url + "/hook")
    failed_rule = rule("job_failed", channels=[hook])
    job = b.job(status="failed")
    evaluate(now=T0)
    alert = Alert.objects.get()
    assert alert.acknowledge(by="otto", now=T0) and not alert.acknowledge(by="otto", now=T0)
    assert send_due(now=T0) == {"delivered": 0, "failed": 0, "cancelled": 1}
    assert Delivery.objects.get().last_error == "not sent: the alert was acknowledged by otto"

    Job.objects.filter(pk=job.pk).update(status="queued")
    evaluate(now=T0 + timedelta(minutes=1))
    assert Delivery.objects.count() == 1, "its resolution is not sent either"

    Job.objects.filter(pk=job.pk).update(status="failed")
    evaluate(now=T0 + timedelta(minutes=2))
    second = Alert.objects.firing().get()
    second.silence(60, by="otto", now=T0 + timedelta(minutes=2))
    Job.objects.filter(pk=job.pk).update(status="queued")
    evaluate(now=T0 + timedelta(minutes=3))
    Job.objects.filter(pk=job.pk).update(status="failed")
    evaluate(now=T0 + timedelta(minutes=4))
    third = Alert.objects.firing().get()
    assert third.silenced_until == T0 + timedelta(minutes=62), "the silence outlives the alert it was set on"
    send_due(now=T0 + timedelta(minutes=4))
    assert receiver.received == [] and failed_rule.alerts.count() == 3
    assert list(second.events.values_list("kind", flat=True)) == ["fired", "silenced", "resolved"]


def test_each_notification_and_the_alerts_page_link_to_the_page_of_what_is_in_breach(rule, receiver, settings,
                                                                                    client, viewer):
    from alerts.models import subject_path

    settings.YARDSTICK_URL = "https://yardstick.example.com"
    hook = Channel.create(name="ops hook", kind="webhook", target=receiver.url + "/hook")
    slack = Channel.create(name="ops slack", kind="slack", target=receiver.url + "/slack")
    email = Channel.create(name="ops mail", kind="email", target="oncall@example.com")
    rule("job_failed", channels=[hook, slack, email], name="jobs that fail")
    job = b.job(name="doomed", status="failed")
    evaluate(now=T0)
    send_due(now=T0)
    link = f"https://yardstick.example.com/jobs/{job.pk}"
    (body,) = receiver.bodies("/hook")
    assert (body["url"], body["alert"]["url"], body["alert"]["path"]) == (link, link, f"/jobs/{job.pk}")
    assert receiver.bodies("/slack")[0]["text"].endswith(f"failed {link}")
    assert f"open: {link}\n" in mail.outbox[0].body
    client.force_login(viewer)
    assert f'<a href="/jobs/{job.pk}" class="alert-subject"><code>job:{job.pk}</code></a>' in client.get(
        "/alerts").content.decode()

    assert [subject_path(s) for s in ("node:gpu-a", "device:gpu a/3", "sweep:7:stalled", "cluster:ray-1",
                                      "team:research", "campaign:4", "something:else", "job:")] == [
        "/nodes/gpu-a", "/nodes/gpu%20a", "/sweeps/7", "/clusters/ray-1", "/costs?group=team", "/campaigns/4",
        "/alerts", "/alerts"]
    settings.YARDSTICK_URL = ""
    assert Alert.objects.get().url is None

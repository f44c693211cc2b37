"""GET /healthz: 200 when every part answers, 503 naming what does not."""

import pytest
from celery.contrib.testing.worker import start_worker

from tests.waiting import wait_for
from yardstick.celery import app
from yardstick.embedded import EmbeddedRedis
from yardstick.models import Heartbeat


@pytest.fixture
def celery_worker(transactional_db):
    """A real Celery worker (a thread in this process) on the real broker."""
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["default"], loglevel="WARNING") as worker:
        yield worker


def record_a_sample(spool_dir):
    """One tick of a real agent (simulated source) writing to the test database."""
    from django.db import connection

    from collector.agent.runner import Agent
    from collector.agent.sources.sim import SimSource
    from collector.agent.spool import Spool
    from tests.conftest import connection_dsn

    agent = Agent(SimSource(nodes=1, gpus=1, seed=1), connection_dsn(connection.settings_dict), Spool(spool_dir))
    agent.run(ticks=1)
    assert agent.samples_written == 1


def test_it_is_200_when_every_part_answers(client, celery_worker, tmp_path):
    from yardstick.tasks import beat_tick

    beat_tick.delay()  # what beat sends, through the real broker to the real worker
    wait_for(lambda: Heartbeat.age_s("beat") is not None, 20, "the worker to run beat_tick")
    record_a_sample(tmp_path)

    resp = client.get("/healthz")
    body = resp.json()
    assert resp.status_code == 200, body
    assert body["ok"] is True
    assert set(body["checks"]) == {"database", "broker", "worker", "beat", "collectors"}
    assert body["checks"]["worker"]["workers"], "the worker answered the ping by name"
    assert body["checks"]["beat"]["age_s"] < 20
    assert body["checks"]["collectors"]["age_s"] < 60


def test_it_is_503_naming_the_broker_when_redis_is_down(client, settings, tmp_path, db):
    redis = EmbeddedRedis(tmp_path)
    redis.start()
    settings.REDIS_URL = redis.url
    assert client.get("/healthz").json()["checks"]["broker"]["ok"] is True

    redis.stop()
    resp = client.get("/healthz")
    body = resp.json()
    assert resp.status_code == 503
    assert body["ok"] is False
    assert body["checks"]["broker"]["ok"] is False
    assert "Error" in body["checks"]["broker"]["detail"]
    assert body["checks"]["database"]["ok"] is True, "one part down does not hide the others"


def test_it_reports_beat_and_collectors_that_went_quiet(client, settings, db):
    from django.utils import timezone

    settings.BEAT_STALE_S = 30
    Heartbeat.objects.create(name="beat", at=timezone.now() - timezone.timedelta(seconds=300))
    body = client.get("/healthz").json()
    assert body["checks"]["beat"]["ok"] is False
    assert "limit 30 s" in body["checks"]["beat"]["detail"]
    assert body["checks"]["collectors"] == {**body["checks"]["collectors"], "ok": False}
    assert "no telemetry sample yet" in body["checks"]["collectors"]["detail"]


def test_it_needs_no_login_and_is_never_cached(client, db):
    resp = client.get("/healthz")
    assert resp.status_code in (200, 503)
    assert "no-cache" in resp["Cache-Control"] or "max-age=0" in resp["Cache-Control"]


def test_beat_sends_its_heartbeat_as_it_starts_not_one_interval_later(embedded_services):
    """Beat's first run of an interval entry comes one interval after it starts: /healthz would say beat is down
    for its first 10 s. The beat_init handler (yardstick/celery.py) sends beat-tick at once, to the real broker."""
    import json

    from celery.signals import beat_init

    from yardstick.celery import app

    with app.connection_for_write() as conn:
        redis = conn.default_channel.client
        before = redis.llen("default")
        beat_init.send(sender=None)
        assert redis.llen("default") == before + 1
        sent = redis.lindex("default", 0)  # the newest: kombu pushes on the left
        redis.lrem("default", 1, sent)
    assert json.loads(sent)["headers"]["task"] == "yardstick.tasks.beat_tick"

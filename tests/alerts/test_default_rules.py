"""A fresh install starts with the default alert rules: `up`'s first run makes them beside the admin user, so a
failed job or a cluster that stopped answering shows on the Alerts page before anyone wrote a rule. An admin's
changes to them stand: a later start makes none again."""

import io

import pytest
from django.utils import timezone

from alerts.evaluate import evaluate
from alerts.models import Alert, AlertRule
from launch.models import Cluster
from tests.dashboard import builders as b
from trainer.models import Job
from yardstick.runner import Runner


@pytest.fixture
def first_start(transactional_db, settings, tmp_path):
    """prepare_database of a control plane's `up` (web role) on this test's database and a data dir of its own
    (transactional: it closes its connections at the end, as `up` does before starting its children)."""
    settings.DATA_DIR = tmp_path
    return Runner(settings, "127.0.0.1", 8205, out=io.StringIO(), roles=("web",)).prepare_database


def rules():
    return list(AlertRule.objects.order_by("name").values_list("name", "kind", "duration", "scope", "enabled"))


def test_the_first_start_makes_the_default_rules_and_a_later_one_keeps_an_admins_changes(first_start, tmp_path):
    assert not AlertRule.objects.exists()
    password = first_start()
    assert password and (tmp_path / "admin-password").read_text().strip() == password
    assert rules() == [("Cluster unreachable", "cluster_unreachable", 5, "", True), ("Job failed", "job_failed", 0, "", True)]
    assert not AlertRule.objects.filter(channels__isnull=False).exists(), "no channel: they show on the page"

    AlertRule.objects.get(kind="job_failed").change({"enabled": False})
    AlertRule.objects.filter(kind="cluster_unreachable").delete()
    assert first_start() is None, "not a first start: the admin exists"
    assert rules() == [("Job failed", "job_failed", 0, "", False)]


def test_the_default_rules_fire_on_a_failed_job_and_a_cluster_silent_for_five_minutes(first_start):
    first_start()
    job = b.job(name="walk trl", status="failed")
    Job.objects.filter(pk=job.pk).update(error="ValueError: no model", finished_at=timezone.now())
    silent = Cluster.objects.create(name="ray-a", kind="ray", address="http://ray-head:8265", error="connection refused",
                                    unreachable_since=timezone.now() - timezone.timedelta(minutes=6))
    Cluster.objects.create(name="ray-b", kind="ray", address="http://ray-b:8265",
                           unreachable_since=timezone.now() - timezone.timedelta(minutes=2))

    evaluate()
    firing = dict(Alert.objects.filter(state="firing").values_list("subject", "rule__name"))
    assert firing == {f"job:{job.pk}": "Job failed", f"cluster:{silent.name}": "Cluster unreachable"}
    assert "ValueError: no model" in Alert.objects.get(subject=f"job:{job.pk}").message

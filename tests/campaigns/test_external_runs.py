"""An external (MLflow) run joins a campaign with the tag yardstick.campaign: the campaign's id or its name."""

from django.test import Client

from campaigns import figures
from campaigns.models import Campaign
from campaigns.tasks import join_tagged_runs
from tracking import store


def run_tagged(experiment_id, value, name):
    return store.create_run(experiment_id, tags=[{"key": "yardstick.campaign", "value": value}], run_name=name)


def test_tagged_runs_join_by_id_or_name_and_show_their_own_gain(db, viewer):
    c = Campaign.objects.create(name="trl loop", team="research", envs=["arithmetic"], schedule=["arithmetic"])
    Campaign.objects.create(name="twin", team="t", envs=["arithmetic"], schedule=["arithmetic"])
    Campaign.objects.create(name="twin", team="t", envs=["arithmetic"], schedule=["arithmetic"])
    exp = store.create_experiment("gsm8k-grpo")
    by_id = run_tagged(exp.pk, str(c.pk), "by id")
    by_name = run_tagged(exp.pk, "trl loop", "by name")
    ambiguous = run_tagged(exp.pk, "twin", "two campaigns have this name")
    store.create_run(exp.pk, run_name="untagged")

    assert join_tagged_runs() == 2
    assert list(c.jobs()) == [by_id.job, by_name.job]
    assert not hasattr(ambiguous.job, "campaign_run") or ambiguous.job.campaign_run is None
    assert join_tagged_runs() == 0  # once is enough

    rows = figures.summary(c)["runs"]
    assert [r["source"] for r in rows] == ["external", "external"]
    assert rows[0]["own_gain_from"] == "its own eval score" and rows[0]["net_gain_points"] is None
    client = Client()
    client.force_login(viewer)
    assert client.get(f"/api/campaigns/{c.pk}").json()["runs"] == [by_id.job.pk, by_name.job.pk]

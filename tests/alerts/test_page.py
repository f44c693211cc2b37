"""The Alerts page: everyone in a role reads it; admins' rule and channel forms name a bad field and store nothing."""

from alerts.evaluate import evaluate
from alerts.models import Alert, AlertRule, Channel
from tests.alerts.conftest import T0
from tests.dashboard import builders as b


def test_the_page_lists_firing_alerts_first_then_history_and_offers_actions_by_role(client, rule, viewer,
                                                                                     operator):
    failed_rule = rule("job_failed", name="failures")
    first, second = b.job(name="one", status="failed"), b.job(name="two", status="failed")
    evaluate(now=T0)
    Alert.objects.get(subject=f"job:{first.pk}").resolve(T0, "cleared")

    client.force_login(viewer)
    page = client.get("/alerts").content.decode()
    assert page.index(f"job:{second.pk}") < page.index(f"job:{first.pk}"), "firing first"
    assert "failures" in page and "Acknowledge" not in page and "New rule" not in page
    client.force_login(operator)
    body = client.get("/alerts?part=body").content.decode()
    assert body.count("Acknowledge") == 1 and "<html" not in body
    assert failed_rule.describe() in body


def test_an_admin_makes_a_channel_and_a_rule_on_the_page_and_bad_fields_store_nothing(client, admin_user):
    client.force_login(admin_user)
    resp = client.post("/alerts/rules/create", {"name": "spend", "kind": "idle_spend", "threshold": "lots"},
                       follow=True)
    assert "Rule not created: threshold must be a number" in resp.content.decode()
    assert not AlertRule.objects.exists()
    resp = client.post("/alerts/channels/create", {"name": "mail", "kind": "email", "target": "not-an-address"},
                       follow=True)
    assert "Channel not created: target of an email channel must be email addresses" in resp.content.decode()

    client.post("/alerts/channels/create", {"name": "mail", "kind": "email", "target": "oncall@example.com"})
    channel = Channel.objects.get()
    client.post("/alerts/rules/create", {"name": "spend", "kind": "idle_spend", "threshold": "12.5",
                                         "duration": "", "scope": "team:research", "channels": [str(channel.pk)],
                                         "enabled": "on"})
    made = AlertRule.objects.get()
    assert (made.threshold, made.duration, made.scope, made.enabled) == (12.5, 60, "team:research", True)
    assert list(made.channels.all()) == [channel]

    client.post(f"/alerts/rules/{made.pk}/edit", {"enabled": "off"})
    made.refresh_from_db()
    assert not made.enabled and list(made.channels.all()) == [channel], "the toggle changes only enabled"
    resp = client.post(f"/alerts/rules/{made.pk}/edit", {"name": "spend", "kind": "idle_spend", "threshold": "-1"},
                       follow=True)
    assert f"Rule {made.pk} not changed: threshold must be" in resp.content.decode()
    made.refresh_from_db()
    assert made.threshold == 12.5 and not made.enabled

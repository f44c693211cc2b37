"""The alerts API: viewers read, operators acknowledge and silence, admins manage rules and channels; every bad
field is named with what is accepted, and changes nothing stored."""

import json

import pytest

from alerts.evaluate import evaluate
from alerts.models import Alert, AlertEvent, AlertRule, Channel
from tests.alerts.conftest import T0
from tests.dashboard import builders as b


@pytest.fixture
def call(client, api_token):
    def do(user, method, path, body=None):
        headers = {"HTTP_AUTHORIZATION": f"Bearer {api_token(user)}"}
        data = body if isinstance(body, (str, bytes)) else json.dumps(body) if body is not None else None
        return getattr(client, method.lower())(path, data=data, content_type="application/json", **headers)

    return do


def test_an_admin_creates_changes_lists_and_deletes_a_rule(call, admin_user, viewer):
    channel = call(admin_user, "POST", "/api/alert-channels",
                   {"name": "ops", "kind": "slack", "target": "https://hooks.example.com/T1"}).json()
    made = call(admin_user, "POST", "/api/alert-rules", {"name": "KL", "kind": "kl_high", "threshold": 0.1,
                                                         "duration": 4, "scope": "team:research",
                                                         "channels": [channel["id"]]})
    assert made.status_code == 201
    rule = made.json()
    assert (rule["description"], rule["channels"], rule["enabled"]) == (
        "KL above 0.1 for 4 steps (team:research)", [channel["id"]], True)

    changed = call(admin_user, "PATCH", f"/api/alert-rules/{rule['id']}", {"threshold": 0.2, "enabled": False})
    assert changed.status_code == 200 and changed.json()["threshold"] == 0.2 and not changed.json()["enabled"]
    listed = call(viewer, "GET", "/api/alert-rules").json()
    assert [r["id"] for r in listed["rules"]] == [rule["id"]] and "budget" in listed["kinds"]
    assert call(viewer, "PATCH", f"/api/alert-rules/{rule['id']}", {"enabled": True}).status_code == 403
    assert call(viewer, "GET", "/api/alert-channels").status_code == 403, "a webhook URL is a secret"
    assert call(admin_user, "DELETE", f"/api/alert-rules/{rule['id']}").json() == {"deleted": rule["id"]}
    assert not AlertRule.objects.exists()
    assert call(admin_user, "DELETE", f"/api/alert-rules/{rule['id']}").status_code == 404
    assert call(admin_user, "PUT", "/api/alert-rules", {}).status_code == 405


@pytest.mark.parametrize("body, field, words", [
    ({"name": "x", "kind": "gpu_hot"}, "kind", "kind must be one of gpu_idle, node_stale"),
    ({"name": "x", "kind": "kl_high"}, "threshold", "threshold is required for a kl_high rule"),
    ({"name": "x", "kind": "kl_high", "threshold": "lots"}, "threshold", "must be a number (limit on train/kl)"),
    ({"name": "x", "kind": "kl_high", "threshold": -1}, "threshold", "from 0 to"),
    ({"name": "x", "kind": "gpu_idle", "duration": 0}, "duration", "a whole number of minutes"),
    ({"name": "x", "kind": "gpu_idle", "duration": 2.5}, "duration", "got 2.5"),
    ({"name": "x", "kind": "job_failed", "threshold": 3}, "threshold", "takes no threshold"),
    ({"name": "x", "kind": "idle_spend", "threshold": 5, "scope": "node:gpu-a"}, "scope", "team:<name>"),
    ({"name": "x", "kind": "budget", "threshold": 80, "scope": "job:abc"}, "scope", "job:<id>"),
    ({"name": "x", "kind": "budget", "threshold": 80, "channels": [99]}, "channels", "no channel 99"),
    ({"name": "x", "kind": "budget", "threshold": 80, "channels": [10 ** 30]}, "channels", "list of channel ids"),
    ({"name": "x", "kind": "budget", "threshold": 80, "scope": "job:" + "9" * 30}, "scope", "job:<id>"),
    ({"name": "x", "kind": "budget", "threshold": 80, "enabled": "yes"}, "enabled", "true or false"),
    ({"name": "", "kind": "budget", "threshold": 80}, "name", "1 to 200 characters"),
    ({"kind": "budget", "threshold": 80}, "name", "name is required"),
    ({"name": "x", "kind": "budget", "threshold": 80, "colour": "red"}, "colour", "accepted fields are"),
])
def test_a_bad_rule_field_is_named_with_what_is_accepted_and_nothing_is_stored(call, admin_user, body, field,
                                                                               words):
    resp = call(admin_user, "POST", "/api/alert-rules", body)
    assert resp.status_code == 400
    assert resp.json()["field"] == field and words in resp.json()["error"]
    assert not AlertRule.objects.exists()


def test_a_bad_patch_changes_nothing_and_bad_channels_are_refused(call, admin_user, rule):
    kept = rule("kl_high", threshold=0.1, duration=3)
    resp = call(admin_user, "PATCH", f"/api/alert-rules/{kept.pk}", {"threshold": 0.5, "duration": -2})
    assert resp.status_code == 400 and resp.json()["field"] == "duration"
    kept.refresh_from_db()
    assert (kept.threshold, kept.duration) == (0.1, 3)
    assert call(admin_user, "PATCH", f"/api/alert-rules/{kept.pk}", "[1]").json()["field"] == "body"
    for body, field in (({"name": "a", "kind": "sms", "target": "x"}, "kind"),
                        ({"name": "a", "kind": "webhook", "target": "ftp://example.com"}, "target"),
                        ({"name": "a", "kind": "email", "target": "oncall@, b@example.com"}, "target")):
        resp = call(admin_user, "POST", "/api/alert-channels", body)
        assert resp.status_code == 400 and resp.json()["field"] == field, body
    assert not Channel.objects.exists()


def test_an_operator_acknowledges_and_silences_over_the_api_and_a_viewer_may_only_read(call, rule, operator,
                                                                                        viewer):
    rule("job_failed")
    b.job(status="failed")
    evaluate(now=T0)
    alert = Alert.objects.get()

    listed = call(viewer, "GET", "/api/alerts?state=firing").json()
    assert [a["id"] for a in listed["alerts"]] == [alert.pk] and listed["deliveries"] == []
    assert call(viewer, "GET", "/api/alerts?state=open").json()["field"] == "state"
    assert call(viewer, "POST", f"/api/alerts/{alert.pk}/ack").status_code == 403

    acked = call(operator, "POST", f"/api/alerts/{alert.pk}/ack")
    assert acked.status_code == 200 and acked.json()["acknowledged_by"] == "otto"
    again = call(operator, "POST", f"/api/alerts/{alert.pk}/ack")
    assert again.status_code == 409 and "already acknowledged by otto" in again.json()["error"]

    for body, words in (({"minutes": 0}, "from 1 to 10080"), ({"minutes": "soon"}, "got 'soon'"),
                        ({}, "minutes is required"), ({"minutes": 5, "why": "x"}, "unknown field 'why'")):
        resp = call(operator, "POST", f"/api/alerts/{alert.pk}/silence", body)
        assert resp.status_code == 400 and words in resp.json()["error"], body
    assert Alert.objects.get().silenced_until is None, "a refused silence sets nothing"
    silenced = call(operator, "POST", f"/api/alerts/{alert.pk}/silence", {"minutes": 30}).json()
    assert silenced["silenced"] and silenced["silenced_until"]
    assert list(AlertEvent.objects.values_list("kind", flat=True)) == ["fired", "acknowledged", "silenced"]
    assert call(operator, "POST", "/api/alerts/999/ack").status_code == 404

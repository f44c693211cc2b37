"""A node's owner team (who pays for its idle time) and its devices' names: the model and the admin."""

import pytest

from tests.dashboard import builders as b


def test_it_sets_and_clears_the_owner_keeping_other_labels(db):
    node = b.node("gpu-a", team="research")
    node.labels = {**node.labels, "zone": "eu-1"}
    node.save()
    assert node.set_owner(" infra ") == "infra"
    node.refresh_from_db()
    assert node.labels == {"team": "infra", "zone": "eu-1"} and node.owner == "infra"
    node.set_owner("")
    node.refresh_from_db()
    assert node.labels == {"zone": "eu-1"} and node.owner is None


@pytest.mark.parametrize("team, message", [
    ("x" * 101, "owner team must be at most 100 characters, got 101"),
    ("a\tb", "owner team must be printable text without control characters, got 'a\\tb'"),
    (42, "owner team must be text, got 42"),
])
def test_it_refuses_a_bad_owner_and_stores_nothing(db, team, message):
    node = b.node("gpu-a", team="research")
    with pytest.raises(ValueError) as err:
        node.set_owner(team)
    assert str(err.value) == message
    node.refresh_from_db()
    assert node.owner == "research"


def test_idle_time_is_charged_to_the_owner_set_here(db):
    """costs.attribution reads the same `team` label."""
    from datetime import datetime, timedelta, timezone

    node = b.node("gpu-a")
    dev = b.device(node, 0)
    b.prices()
    start = b.floor_minute(datetime.now(timezone.utc)) - timedelta(minutes=10)
    node.set_owner("infra")
    b.minutes(dev, start, 3)
    b.attribute(now=start + timedelta(minutes=5))
    from costs.ledger import usage

    teams = {u.team for u in usage(start, start + timedelta(minutes=5))}
    assert teams == {"infra"}


def test_devices_are_named_by_kind():
    from collector.models import Device

    assert Device(source="host", index=0).label == "CPU"
    assert Device(source="nvml", index=3).label == "GPU 3"
    assert Device.label_for("sim", 1) == "GPU 1"


def test_the_admin_lists_nodes_and_edits_the_owner(client, admin_user):

    node = b.node("gpu-a", team="research")
    b.device(node, 0)
    b.device(node, 1, source="host", model="AMD EPYC")
    client.force_login(admin_user)

    listing = client.get("/admin/collector/node/").content.decode()
    assert "gpu-a" in listing and "research" in listing
    change = client.get(f"/admin/collector/node/{node.pk}/change/")
    assert change.status_code == 200
    html = change.content.decode()
    assert 'name="owner_team"' in html and 'value="research"' in html and "CPU" in html

    form = _hidden_inputs(html)  # the device inline's management form, as the browser would send it
    resp = client.post(f"/admin/collector/node/{node.pk}/change/", {**form, "owner_team": "infra", "_save": "Save"})
    assert resp.status_code == 302
    node.refresh_from_db()
    assert node.owner == "infra"

    bad = client.post(f"/admin/collector/node/{node.pk}/change/", {**form, "owner_team": "y" * 101, "_save": "Save"})
    assert bad.status_code == 200 and "at most 100 characters" in bad.content.decode()
    node.refresh_from_db()
    assert node.owner == "infra"
    assert client.get("/admin/collector/node/add/").status_code == 403, "agents register nodes"


def _hidden_inputs(html):
    import re

    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html))


def test_an_operator_cannot_reach_the_node_admin(client, operator):
    node = b.node("gpu-a", team="research")
    client.force_login(operator)
    resp = client.get(f"/admin/collector/node/{node.pk}/change/")
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]

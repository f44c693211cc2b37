"""Fixtures for the alert tests: rules made through the model, a fixed clock."""

from datetime import datetime, timedelta, timezone

import pytest

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def rule(db):
    from alerts.models import AlertRule

    def make(kind, threshold=None, duration=None, scope="", channels=(), name=None):
        fields = {"name": name or kind, "kind": kind, "scope": scope, "channels": [c.pk for c in channels]}
        if threshold is not None:
            fields["threshold"] = threshold
        if duration is not None:
            fields["duration"] = duration
        made = AlertRule.create(fields)
        # Made an hour before the tests' clock: what ended since then is news to it.
        AlertRule.objects.filter(pk=made.pk).update(created_at=T0 - timedelta(hours=1))
        made.refresh_from_db()
        return made

    return make

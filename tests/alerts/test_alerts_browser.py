"""In Chromium: an operator acknowledges and silences a firing alert on the Alerts page, and a new one appears
without a reload."""

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.evaluate import evaluate
from alerts.models import Alert
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import in_thread, log_in, shot, user_in_role

pytestmark = pytest.mark.browser


def test_an_operator_acknowledges_then_silences_an_alert_and_a_new_one_shows_live(  # noqa: F811
        live_server, page, transactional_db, django_user_model, rule, output_dir, request):
    rule("job_failed", name="failures")
    job = b.job(name="broken", status="failed")
    evaluate()
    alert = Alert.objects.get()
    user_in_role(django_user_model, "otto", "operator")
    log_in(page, live_server.url, "otto", "/alerts")

    row = page.locator(f'#alerts-table tr[data-alert="{alert.pk}"]')
    assert row.get_attribute("data-state") == "firing" and f"job:{job.pk}" in row.inner_text()
    row.locator(".ack-form button").click()
    page.wait_for_url(live_server.url + "/alerts")
    assert f"Alert {alert.pk} acknowledged" in page.inner_text(".messages")
    alert.refresh_from_db()
    assert alert.acknowledged_by == "otto"
    assert "acknowledged by otto" in row.locator(".handled").inner_text()
    assert row.locator(".ack-form").count() == 0

    row.locator(".silence-form input[name=minutes]").fill("45")
    before = timezone.now()
    row.locator(".silence-form button").click()
    page.wait_for_url(live_server.url + "/alerts")
    alert.refresh_from_db()
    assert before + timedelta(minutes=44) < alert.silenced_until < timezone.now() + timedelta(minutes=46)
    assert "silenced until" in row.locator(".handled").inner_text()
    shot(page, output_dir, request, "handled")

    other = b.job(name="also broken", status="failed")
    in_thread(evaluate)
    fresh = Alert.objects.get(subject=f"job:{other.pk}")
    page.locator(f'#alerts-table tr[data-alert="{fresh.pk}"]').wait_for(timeout=15000)
    assert page.locator("#alerts-live").inner_text().startswith("live")

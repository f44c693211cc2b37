"""The fleet page in Chromium, served by a real Daphne: a device that had a critical XID is marked unhealthy and
counted on the card, and a device that turns unhealthy while the page is open is counted without a reload."""

from datetime import datetime, timedelta, timezone

import pytest

from collector.models import DeviceEvent
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

UTC = timezone.utc
LOADED_AT = "window.__yardstickLoadedAt"


def test_a_device_with_a_critical_xid_is_marked_and_counted_and_the_count_follows_live(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    now = datetime.now(UTC)
    a, c = b.node("gpu-a", interval_s=30), b.node("gpu-b", interval_s=30)
    sick, fine, later = b.device(a, 0), b.device(a, 1), b.device(c, 0)
    for d in (sick, fine, later):
        b.latest(d, util_pct=90, power_w=600, ts=now)  # fresh for 90 s: the whole test
    DeviceEvent.objects.create(device=sick, ts=now - timedelta(minutes=5), kind="xid", code=79, detail="XID 79",
                               critical=True)
    DeviceEvent.objects.create(device=fine, ts=now - timedelta(minutes=5), kind="xid", code=13, detail="XID 13",
                               critical=False)  # not the GPU's fault: no mark
    user_in_role(django_user_model, "ivy", "viewer", subprocess=True)
    log_in(page, live_web.url, "ivy", "/")
    record_events(page)
    page.goto(live_web.url + "/")
    wait_subscribed(page)
    loaded = page.evaluate(LOADED_AT)

    card = page.locator("#card-unhealthy")
    assert card.inner_text() == "1"
    warn = "document.getElementById('card-unhealthy').closest('.card').classList.contains('stat-warn')"
    assert page.evaluate(warn) is True
    row_a = page.locator("#node-table tbody tr", has_text="gpu-a")
    mark = row_a.locator(".unhealthy")
    assert mark.count() == 1 and mark.inner_text() == "✗ unhealthy (GPU 0)"
    assert mark.get_attribute("title").startswith(f"XID 79 at {(now - timedelta(minutes=5)):%Y-%m-%d %H:%M}")
    assert page.locator("#node-table tbody tr", has_text="gpu-b").locator(".unhealthy").count() == 0
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    hover = ("(name) => { const t = window.Yardstick.figs.heatmap.el.data[0];"
             " return t.text[t.y.indexOf(name)]; }")
    text_a = page.evaluate(hover, "gpu-a")
    assert "✗ unhealthy: XID 79 at " in text_a[0] and "unhealthy" not in text_a[1]
    box = page.locator('.chart[data-fig="heatmap"] .nsewdrag').bounding_box()  # the plot area: 2 x 2 cells
    page.mouse.move(box["x"] + box["width"] / 4, box["y"] + box["height"] / 4)  # gpu-a, GPU 0
    page.wait_for_function("document.querySelector('.hoverlayer')?.textContent.includes('✗ unhealthy: XID 79')")
    shot(page, output_dir, request, "one")

    # gpu-b's GPU reports a contained ECC error (XID 94) with no new sample: the card counts it live.
    DeviceEvent.objects.create(device=later, ts=datetime.now(UTC), kind="xid", code=94, detail="XID 94",
                               critical=True)
    page.wait_for_function("document.getElementById('card-unhealthy').textContent.trim() === '2'")
    assert page.evaluate(LOADED_AT) == loaded, "updated in place, not reloaded"

"""A 5,000-device fleet in Chromium, served by a real Daphne with its live publisher: the heatmap groups (by node
past 2,000 cells, by GPU model when asked), drills down on a click, keeps the view in the URL, and the idle list
follows a device going idle without a reload."""

from datetime import UTC, datetime, timedelta

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NODES, PER_NODE = 625, 8  # 5,000 GPUs
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA B200")


def big_fleet():
    """625 nodes of 8 GPUs, H100 on even nodes and B200 on odd ones, pool label a or b, every GPU busy."""
    from collector.models import Device, LatestSample, Node

    now = datetime.now(UTC)
    nodes = Node.objects.bulk_create([
        Node(name=f"n{i:04d}", labels={"pool": "ab"[i % 2]}, interval_s=60,
             first_seen=now, registered_at=now) for i in range(NODES)])
    devices = Device.objects.bulk_create([
        Device(uuid=f"GPU-{n.name}-{j}", node=n, index=j, model=MODELS[i % 2], source="nvml", simulated=False,
               power_estimated=False, mem_total_mib=81559, first_seen=now, registered_at=now)
        for i, n in enumerate(nodes) for j in range(PER_NODE)])
    LatestSample.objects.bulk_create([
        LatestSample(device=d, ts=now + timedelta(seconds=30), util_pct=50 + d.index, power_w=400, temp_c=50.0,
                     mem_used_mib=1000, sm_active_pct=25) for d in devices])
    return {(d.node.name, d.index): d for d in devices}


def click_cell(page, column, row, columns, rows):  # noqa: F811 - a page, not the fixture
    """Click the heatmap's cell at (column, row) of a columns x rows grid, as a person would."""
    box = page.locator('.chart[data-fig="heatmap"] .nsewdrag').bounding_box()
    page.mouse.click(box["x"] + box["width"] * (column + 0.5) / columns, box["y"] + box["height"] * (row + 0.5) / rows)


def heat(page):  # noqa: F811
    return page.evaluate("(() => { const el = document.querySelector('.chart[data-fig=heatmap]');"
                         " return {group: el.dataset.group, cells: el.data[0].z.flat().length}; })()")


def test_a_5000_gpu_fleet_groups_drills_down_and_its_idle_list_follows_live(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    devices = big_fleet()
    b.prices(per_hour="8.00", per_kwh="0.10", pue="1.2")  # 5,000 x ($8 + 0.4 kW x $0.10 x 1.2) = $40,240.00/h
    user_in_role(django_user_model, "gia", "viewer", subprocess=True)
    log_in(page, live_web.url, "gia", "/?live=0")
    record_events(page)
    page.goto(live_web.url + "/")
    wait_subscribed(page)
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    # Past 2,000 cells: a cell per node, 625 of them.
    assert page.evaluate("document.querySelector('.chart[data-fig=heatmap]').dataset.group") == "node"
    assert page.locator("#card-devices").inner_text() == "5000"
    assert "625 of 625 nodes" in page.locator("#node-table caption").inner_text()
    assert page.locator("#card-burn").inner_text() == "$40,240.00"
    spilled = page.evaluate("Array.from(document.querySelectorAll('.cards .stat-value'))"
                            ".filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent)")
    assert spilled == [], "a card's figure runs out of its card"

    # By GPU model: two cells, the grouping in the URL.
    page.select_option("#fleet-group", "model")
    page.wait_for_function("document.querySelector('.chart[data-fig=heatmap]').dataset.group === 'model'")
    assert heat(page) == {"group": "model", "cells": 2} and "group=model" in page.url
    # By name, B200 first: 312 odd nodes of 8, at 50 to 57% (53.5, half up), as a person would add them.
    cell = page.evaluate("(t => [t.text[0][0], t.hovertext[0][0]])(document.querySelector('.chart[data-fig=heatmap]').data[0])")
    assert cell == ["NVIDIA B200<br>54%", "NVIDIA B200<br>mean 54% · worst 50%<br>2496 devices · 0 idle · 0 stale"], cell

    # Drill into the B200s (the first cell): a cell per node of them, the node table filtered on the server.
    click_cell(page, 0, 0, 2, 1)
    page.wait_for_function("location.search.includes('model=NVIDIA+B200')")
    page.wait_for_function("document.querySelector('.chart[data-fig=heatmap]').dataset.group === 'device'"
                           " || document.querySelector('.chart[data-fig=heatmap]').dataset.group === 'node'")
    page.wait_for_function("document.querySelector('#node-table caption').textContent.includes('312 of 625')")
    assert page.locator('#fleet-filters [data-filter="model"]').count() == 1

    # Into one node: its eight devices, a cell each.
    page.goto(live_web.url + "/?model=NVIDIA+B200&node=n0001")
    wait_subscribed(page)
    page.wait_for_function("document.querySelector('.chart[data-fig=heatmap]').dataset.group === 'device'")
    assert heat(page) == {"group": "device", "cells": 8}
    loaded = page.evaluate("window.__yardstickLoadedAt")
    idle = page.locator('.fleet-list[data-list="idle"]')
    assert idle.locator("[data-count]").inner_text() == "0"

    # One of its GPUs goes idle: the list names it, without a reload.
    later = datetime.now(UTC) + timedelta(seconds=40)
    b.latest(devices["n0001", 3], util_pct=2, power_w=90, ts=later)
    page.wait_for_function("document.querySelector('.fleet-list[data-list=idle] [data-count]').textContent === '1'",
                           timeout=15_000)
    assert "n0001 / GPU 3" in idle.locator("li").first.inner_text() and "2%" in idle.locator("li").first.inner_text()
    assert page.evaluate("window.__yardstickLoadedAt") == loaded
    # The cards count the whole fleet, filter or not.
    assert page.locator("#card-idle").inner_text() == "1"
    assert page.evaluate("document.getElementById('live-state').dataset.state") == "live"
    shot(page, output_dir, request, "drilled")

    # Removing the filters comes back to the whole fleet by node.
    page.locator('#fleet-filters [data-filter="node"]').click()
    page.locator('#fleet-filters [data-filter="model"]').click()
    page.wait_for_function("document.querySelector('.chart[data-fig=heatmap]').dataset.group === 'node'")
    page.wait_for_function("document.querySelector('#node-table caption').textContent.includes('625 of 625')")
    shot(page, output_dir, request, "by-node")

    # The node table is sorted, paged and searched on the server, swapped in without a reload, kept in the URL.
    loaded = page.evaluate("window.__yardstickLoadedAt")
    first_row = "document.querySelector('#node-table tbody tr').dataset.node"
    page.click('#node-table a[data-sort="name"]')  # sorted by name already: the header reverses it
    page.wait_for_function(f"{first_row} === 'n0624'")
    assert "sort=name" in page.url and "order=desc" in page.url
    page.click('a[data-page-link][rel="next"]')
    page.wait_for_function(f"{first_row} === 'n0574'")
    assert "page=2" in page.url
    page.fill('#node-search input[name="q"]', "n0007")
    page.click('#node-search button[type="submit"]')
    page.wait_for_function("document.querySelectorAll('#node-table tbody tr[data-node]').length === 1")
    assert page.evaluate(first_row) == "n0007" and "q=n0007" in page.url and "page=" not in page.url
    assert page.evaluate("window.__yardstickLoadedAt") == loaded


def test_a_few_groups_are_labelled_on_the_chart_and_one_with_no_reporting_device_is_grey(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    now = datetime.now(UTC)
    for team, util in (("a", 80), ("b", 20), ("c", None)):
        gpu = b.device(b.node(f"node-{team}", team=team, interval_s=60), 0)
        if util is not None:  # team c's GPU has never reported: stale
            b.latest(gpu, util_pct=util, power_w=300, ts=now + timedelta(seconds=30))
    user_in_role(django_user_model, "lou", "viewer", subprocess=True)
    log_in(page, live_web.url, "lou", "/?group=label:team")
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')

    traces = page.evaluate("(d => d.map(t => [t.z, t.text, t.texttemplate]))("
                           "document.querySelector('.chart[data-fig=heatmap]').data)")
    assert traces[0] == [[[80, 20, None]], [["a<br>80%", "b<br>20%", ""]], "%{text}"]
    assert traces[1] == [[[None, None, 0]], [["", "", "c<br>stale"]], "%{text}"], "the stale group grey, on its own"
    drawn = page.evaluate("Array.from(document.querySelectorAll('.chart[data-fig=heatmap] .heatmap-label'), t => t.textContent)")
    assert sorted(t for t in drawn if t) == ["a80%", "b20%", "cstale"], drawn  # each label's lines, run together
    assert "grey: no device of the group reporting" in page.locator("#fleet-heatmap-note").inner_text()
    shot(page, output_dir, request, "pools")

    click_cell(page, 2, 0, 3, 1)  # the grey cell drills down too
    page.wait_for_function("new URLSearchParams(location.search).get('label:team') === 'c'")

"""The pages in Chromium (served by pytest-django's live server): roles, comparing by dollars, the costs CSV."""

import csv
import io
from decimal import Decimal

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, shot, user_in_role

pytestmark = pytest.mark.browser


def test_a_viewer_sees_no_start_stop_or_resume(live_server, page, transactional_db, django_user_model):  # noqa: F811
    running = b.job(name="someone's run", status="running")
    b.steps(running, 8)
    b.job(name="stopped run", status="stopped")
    user_in_role(django_user_model, "vera", "viewer")
    log_in(page, live_server.url, "vera", "/jobs")

    assert page.locator("#jobs-table tbody tr").count() == 2
    assert page.locator("#start").count() == 0, "no Start form"
    assert page.get_by_role("button", name="Stop").count() == 0
    assert page.get_by_role("button", name="Resume").count() == 0
    page.goto(f"{live_server.url}/jobs/{running.pk}")
    page.wait_for_selector('.chart[data-fig="reward"][data-drawn="true"]')
    assert page.get_by_role("button", name="Stop").count() == 0
    assert "vera" in page.inner_text(".who") and "viewer" in page.inner_text(".role")


def test_two_jobs_are_compared_by_dollars(live_server, page, transactional_db, django_user_model, output_dir, request):  # noqa: F811
    cheap, dear = b.two_charged_jobs()
    user_in_role(django_user_model, "lena", "viewer")
    log_in(page, live_server.url, "lena", "/jobs")

    # Tick both on the Jobs page and compare; then switch the x-axis to dollars from the keyboard.
    page.check(f'input[name="pick"][value="{cheap.pk}"]')
    page.check(f'input[name="pick"][value="{dear.pk}"]')
    page.click("#compare-submit")
    page.wait_for_selector('.chart[data-fig="compare"][data-drawn="true"]')
    shot(page, output_dir, request, "by-step")
    page.focus("#x-usd")
    page.keyboard.press("Enter")
    page.wait_for_url("**x=usd")
    page.wait_for_selector('.chart[data-fig="compare"][data-drawn="true"]')

    chart = page.evaluate("""() => { const el = document.querySelector('[data-fig=compare]');
        return {title: el.layout.xaxis.title.text, traces: el.data.map(t => ({name: t.name, x: t.x, y: t.y}))}; }""")
    assert chart["title"] == "cost (USD)"
    traces = {t["name"]: t for t in chart["traces"]}
    assert set(traces) == {f"#{cheap.pk} cheap", f"#{dear.pk} dear"}
    c, d = traces[f"#{cheap.pk} cheap"], traces[f"#{dear.pk} dear"]
    assert c["x"][-1] < d["x"][-1], "the dear run spent more dollars"
    assert c["y"][-1] > d["y"][-1], "and the cheap one scored higher"
    table = page.inner_text("#compare-table")
    assert "$0.60" in table and "$1.80" in table
    assert page.locator("#x-usd").get_attribute("aria-current") == "true"


def test_the_costs_csv_downloads_with_totals_that_add_up(live_server, page, transactional_db, django_user_model,  # noqa: F811
                                                          output_dir, request):
    b.charged_fleet()
    user_in_role(django_user_model, "tim", "viewer")
    log_in(page, live_server.url, "tim", "/costs?group=job")
    page.wait_for_selector('.chart[data-fig="by_day"][data-drawn="true"]')
    shown_fleet = page.inner_text("#total-fleet")

    with page.expect_download() as info:
        page.click("#csv-link")
    download = info.value
    assert download.suggested_filename.startswith("costs-job-") and download.suggested_filename.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(open(download.path()).read())))
    body, total = rows[:-1], rows[-1]
    assert total["key"] == "TOTAL" and len(body) == 2, "the job and the idle owner"
    money = lambda r, k: Decimal(r[k] or "0")  # noqa: E731
    assert sum(money(r, "total_usd") for r in body) == money(total, "total_usd")
    assert sum(money(r, "attributed_usd") for r in body) == money(total, "attributed_usd")
    assert money(total, "attributed_usd") + money(total, "idle_usd") == money(total, "total_usd")
    assert shown_fleet == f"${money(total, 'total_usd'):,.2f}", "the page and the CSV agree to the cent"
    assert any(r["simulated"] == "true" for r in body), "the simulated device is flagged in the export"

    page.emulate_media(media="print")
    assert not page.locator("header.top").is_visible(), "the print stylesheet drops the navigation"
    assert page.locator(".print-only").first.is_visible()
    shot(page, output_dir, request, "print")
    page.emulate_media(media="screen")


def test_the_fleet_and_node_pages_draw_and_the_range_lives_in_the_url(live_server, page, transactional_db,  # noqa: F811
                                                                      django_user_model, output_dir, request):
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    b.prices()
    for n in range(3):
        node = b.node(f"gpu-{n}", team="research" if n else "infra", interval_s=30)
        for i in range(4):
            dev = b.device(node, i, source="sim" if n == 2 else "nvml", simulated=n == 2)
            b.latest(dev, util_pct=(n * 4 + i) * 8, power_w=200 + 50 * i, ts=now if n != 1 else now - timedelta(minutes=9))
            b.samples(dev, now - timedelta(minutes=20), 120, every_s=10, util_pct=10 + 20 * i)
    user_in_role(django_user_model, "ian", "viewer")
    log_in(page, live_server.url, "ian", "/")

    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    assert page.inner_text("#card-stale") == "4", page.inner_text("#node-table")
    assert "4 simulated devices" in page.inner_text(".page-head")
    heat = page.evaluate("document.querySelector('[data-fig=heatmap]').data[0].z")
    assert heat[1] == [None] * 4 and heat[0][1] == 8
    shot(page, output_dir, request, "fleet")

    # Keyboard: tab to the 6h chip and press Enter; the URL keeps the range and the pause.
    page.focus('a.chip:has-text("6h")')
    page.keyboard.press("Enter")
    page.wait_for_url("**range=6h")
    page.click("#live-toggle")
    assert "live=0" in page.url and page.get_attribute("#live-state", "data-state") == "paused"
    page.reload()
    assert page.get_attribute("#live-toggle", "aria-pressed") == "false", "paused survives a reload"

    page.click('a:has-text("gpu-2")')
    page.wait_for_selector('.chart[data-fig="util"][data-drawn="true"]')
    util = page.evaluate("document.querySelector('[data-fig=util]').data.map(t => [t.name, t.x.length])")
    assert util == [[f"GPU {i} (sim)", 0] for i in range(4)] or all(n > 0 for _, n in util)
    page.goto(f"{live_server.url}/nodes/gpu-2?range=1h")
    page.wait_for_selector('.chart[data-fig="util"][data-drawn="true"]')
    util = page.evaluate("document.querySelector('[data-fig=util]').data.map(t => [t.name, t.x.length])")
    assert util == [[f"GPU {i} (sim)", 120] for i in range(4)]
    assert page.inner_text("#resolution") == "raw"
    shot(page, output_dir, request, "node")

    # A wall display: the same fleet page, more columns and bigger figures.
    page.set_viewport_size({"width": 2560, "height": 1440})
    page.goto(f"{live_server.url}/?range=1h")
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    columns = page.evaluate("getComputedStyle(document.querySelector('.grid-2')).gridTemplateColumns.split(' ').length")
    assert columns == 3, "three charts a row on a wall display (two on a laptop)"
    shot(page, output_dir, request, "wall")


LONG = "n" * 200  # a name without a space, as long as a job's name may be
HOSTILE_TEAM = "<b>qa</b><img src=x onerror=alert(2)>"


def _long_named_fleet():
    """A node, job and team named with 200 characters and no space, charged, so every page shows them."""
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    start = b.floor_minute(now) - timedelta(minutes=40)
    b.prices()
    node = b.node("n" * 100, team="t" * 100)  # as long as a stint's node may be
    dev = b.device(node, 0, uuid="GPU-long-0")
    b.latest(b.device(b.node(LONG, team="t" * 100), 0, uuid="GPU-longer-0"), util_pct=40, power_w=300)
    b.latest(dev, util_pct=40, power_w=300)
    b.minutes(dev, start, 30)
    job = b.job(name=LONG, team="t" * 100)
    b.stint(job, dev, start, start + timedelta(minutes=20))
    b.steps(job, 10, start=start, every_s=60)
    b.attribute(now)
    return job


def test_a_200_character_name_never_widens_a_page_or_the_printed_costs(live_server, page, transactional_db,  # noqa: F811
                                                                         django_user_model, output_dir, request):
    job = _long_named_fleet()
    user_in_role(django_user_model, "wes", "viewer")
    log_in(page, live_server.url, "wes", "/jobs")
    for path in ("/jobs", f"/jobs/{job.pk}", f"/compare?jobs={job.pk}", "/costs?group=job", "/costs?group=team",
                 "/costs?group=node", "/", f"/nodes/{LONG}"):
        page.goto(live_server.url + path)
        page.wait_for_load_state("load")
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], f"{path} is {widths[0]} px wide in a {widths[1]} px window"
    page.goto(live_server.url + "/jobs")
    cell = page.locator(f'#jobs-table a[href="/jobs/{job.pk}"]')
    assert cell.get_attribute("title") == f"#{job.pk} {LONG}", "the full name on hover"
    shot(page, output_dir, request, "jobs")

    page.goto(live_server.url + "/costs?group=job")
    page.wait_for_selector('.chart[data-fig="by_day"][data-drawn="true"]')
    page.emulate_media(media="print")
    headers = page.locator("table.data thead th")
    assert headers.count() > 3
    right_edge = page.evaluate("document.documentElement.clientWidth")
    for i in range(headers.count()):
        box = headers.nth(i).bounding_box()
        assert box and box["width"] > 0 and box["x"] + box["width"] <= right_edge + 1, \
            f"printed column {headers.nth(i).inner_text()!r} is off the page"
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    assert LONG in page.inner_text("table.data"), "on paper the name prints whole"
    shot(page, output_dir, request, "print")


def test_user_strings_show_literally_in_chart_legends(live_server, page, transactional_db, django_user_model,  # noqa: F811
                                                      output_dir, request):
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    start = b.floor_minute(now) - timedelta(minutes=40)
    b.prices()
    dev = b.device(b.node("gpu-a", team=HOSTILE_TEAM), 0)
    b.minutes(dev, start, 30)
    b.latest(b.device(b.node("<b>gpu-b</b>", interval_s=3600), 0), util_pct=50, power_w=300)  # a heatmap tick label
    job = b.job(name="<i>run</i>&amp;", team=HOSTILE_TEAM)
    b.stint(job, dev, start, start + timedelta(minutes=20))
    b.steps(job, 10, start=start, every_s=60)
    b.attribute(now)
    user_in_role(django_user_model, "xss", "viewer")
    alerts = []
    page.on("dialog", lambda d: (alerts.append(d.message), d.dismiss()))
    log_in(page, live_server.url, "xss", "/costs?group=team")

    page.wait_for_selector('.chart[data-fig="by_day"][data-drawn="true"]')
    legend = page.locator('[data-fig="by_day"] .legendtext').all_text_contents()
    assert HOSTILE_TEAM in legend and f"idle ({HOSTILE_TEAM})" in legend, legend
    assert page.locator('[data-fig="by_day"] b, [data-fig="by_day"] img').count() == 0
    shot(page, output_dir, request, "costs")

    page.goto(f"{live_server.url}/compare?jobs={job.pk}")
    page.wait_for_selector('.chart[data-fig="compare"][data-drawn="true"]')
    assert page.locator('[data-fig="compare"] .legendtext').all_text_contents() == [f"#{job.pk} <i>run</i>&amp;"]
    assert page.locator('[data-fig="compare"] i').count() == 0

    page.goto(live_server.url + "/")
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    assert page.locator('[data-fig="heatmap"] b, [data-fig="heatmap"] img').count() == 0
    # A node's name as its tick label says it, tags and all (Plotly reads tick text as markup).
    page.wait_for_function("Array.from(document.querySelectorAll('[data-fig=heatmap] text'))"
                           ".some(t => t.textContent === '<b>gpu-b</b>')")
    assert alerts == []


def test_every_page_loads_without_console_errors_and_404s_lead_back(live_server, page, transactional_db,  # noqa: F811
                                                                   django_user_model, output_dir, request):
    job = b.charged_fleet()
    user_in_role(django_user_model, "cora", "viewer")
    errors = []
    # The test server has no WebSocket (/ws/live is Daphne's) and no Celery workers (/healthz answers 503,
    # which the header shows): Chromium logs both; anything else is the page's own error.
    known = ("/ws/live", "/healthz")
    page.on("console", lambda m: m.type == "error" and not any(k in m.text or k in (m.location or {}).get("url", "")
                                                                for k in known) and errors.append(f"{page.url}: {m.text}"))
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
    log_in(page, live_server.url, "cora", "/")
    for path in ("/", "/nodes/gpu-a", "/jobs", f"/jobs/{job.pk}", f"/compare?jobs={job.pk}", "/costs"):
        page.goto(live_server.url + path)
        page.wait_for_load_state("networkidle")
    assert page.evaluate("fetch('/static/yardstick/favicon.svg').then(r => r.status)") == 200
    for path in ("/jobs/999999", "/nodes/nonexistent", "/jobs/abc"):
        errors_before = list(errors)
        resp = page.goto(live_server.url + path)
        assert resp.status == 404
        assert page.locator("header.top nav").is_visible() and page.locator("h1").inner_text() == "Not found"
        errors[:] = errors_before  # the 404 itself is the one error Chromium logs here
    shot(page, output_dir, request, "404")
    page.click("text=the jobs")
    page.wait_for_url(live_server.url + "/jobs")
    assert errors == []


def test_the_costs_page_names_a_reversed_range_as_typed(live_server, page, transactional_db, django_user_model):  # noqa: F811
    user_in_role(django_user_model, "rae", "viewer")
    log_in(page, live_server.url, "rae", "/costs")
    page.goto(live_server.url + "/costs?from=2026-11-10&to=2026-11-01")
    message = page.inner_text("p.error")
    assert "from=2026-11-10 and to=2026-11-01" in message, message
    assert "2026-11-02" not in message


def test_an_admin_sets_a_nodes_owner_and_an_operator_sees_no_form(live_server, page, transactional_db,  # noqa: F811
                                                                  django_user_model, output_dir, request):

    node = b.node("gpu-a", team="research")
    b.device(node, 0, source="host", model="AMD EPYC", uuid="CPU-gpu-a")
    user_in_role(django_user_model, "olga", "operator")
    log_in(page, live_server.url, "olga", "/nodes/gpu-a")
    assert page.locator("#owner-form").count() == 0
    assert page.locator("table.data tbody th").first.inner_text() == "CPU"
    page.goto(live_server.url + "/")
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    assert page.evaluate("document.querySelector('[data-fig=heatmap]').data[0].x") == ["CPU"], "not 'GPU 0'"
    assert "1 CPU" in page.inner_text("#node-table")
    page.context.clear_cookies()

    user_in_role(django_user_model, "adam", "admin")
    log_in(page, live_server.url, "adam", "/nodes/gpu-a")
    page.fill("#owner-team", "x" * 90 + "\u0007")
    page.click("#owner-form button[type=submit]")
    page.wait_for_selector(".messages li.error")
    assert "Owner not changed" in page.inner_text(".messages")
    node.refresh_from_db()
    assert node.owner == "research"

    page.fill("#owner-team", "infra")
    page.click("#owner-form button[type=submit]")
    page.wait_for_selector(".messages li.success")
    assert page.input_value("#owner-team") == "infra" and "team infra" in page.inner_text(".page-head")
    node.refresh_from_db()
    assert node.owner == "infra"
    shot(page, output_dir, request, "owner")


MARKUP_NAMES = ("<!--<script>", "</script><b>x")
NODE_NAMES = ("<!--<script>", "<b>x")  # a node's name is a URL segment: no "/"


def test_it_draws_every_chart_and_shows_names_that_look_like_markup_literally(
        live_server, page, transactional_db, django_user_model, output_dir, request):  # noqa: F811
    from trainer.models import Job

    cheap, dear = b.two_charged_jobs()
    for job, name in zip((cheap, dear), MARKUP_NAMES):
        Job.objects.filter(pk=job.pk).update(name=name)
    for name in NODE_NAMES:  # a collector names its node after its host, unchecked
        b.latest(b.device(b.node(name, interval_s=60), 0), util_pct=60, power_w=400)
    labels = [f"#{cheap.pk} {MARKUP_NAMES[0]}", f"#{dear.pk} {MARKUP_NAMES[1]}"]
    user_in_role(django_user_model, "mara", "viewer")
    log_in(page, live_server.url, "mara", "/jobs")

    # Jobs: the names as typed, no element made of them, and its script runs (ticking both and comparing).
    table = page.inner_text("#jobs-table")
    assert all(label in table for label in labels) and page.locator("#jobs-table b").count() == 0
    page.check(f'input[name="pick"][value="{cheap.pk}"]')
    page.check(f'input[name="pick"][value="{dear.pk}"]')
    page.click("#compare-submit")

    # Compare: its one chart draws, a trace per job under its name.
    page.wait_for_selector('.chart[data-fig="compare"][data-drawn="true"]')
    assert page.locator(".js-plotly-plot").count() == 1
    legend = page.evaluate("[...document.querySelectorAll('[data-fig=compare] .legendtext')].map(t => t.textContent)")
    assert sorted(legend) == sorted(labels)
    assert all(label in page.inner_text("#compare-table") for label in labels)
    assert page.locator("main b").count() == 0
    shot(page, output_dir, request, "compare")

    # The job page: every chart with data draws, and the title is the name.
    for job, label in zip((cheap, dear), labels):
        page.goto(f"{live_server.url}/jobs/{job.pk}")
        page.wait_for_selector('.chart[data-fig="reward"][data-drawn="true"]')
        with_data = page.evaluate("Object.values(JSON.parse(document.getElementById('figures').textContent))"
                                  ".filter(f => !f.empty).length")
        assert with_data >= 4 and page.locator(".js-plotly-plot").count() == with_data
        assert page.inner_text("h1") == f"Job {label}"
    shot(page, output_dir, request, "job")

    # Fleet: the heatmap (a row per node, under its name) and the power chart draw.
    page.goto(f"{live_server.url}/?live=0")
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    page.wait_for_selector('.chart[data-fig="power"][data-drawn="true"]')
    assert page.locator(".js-plotly-plot").count() == 2
    rows = page.evaluate("document.querySelector('[data-fig=heatmap]').data[0].y")
    assert set(NODE_NAMES) <= set(rows) and page.locator("main b").count() == 0
    assert all(name in page.inner_text("main") for name in NODE_NAMES)
    shot(page, output_dir, request, "fleet")


PHONE = {"width": 390, "height": 844}


@pytest.mark.parametrize("path", ["/", "/jobs", "/costs", "/serving", "/sweeps", "/alerts"],
                         ids=["fleet", "jobs", "costs", "serving", "sweeps", "alerts"])
def test_on_a_phone_the_nav_wraps_inside_the_header_and_no_page_is_wider_than_the_screen(  # noqa: F811
        live_server, page, transactional_db, django_user_model, output_dir, request, path):
    """At 390 px the twelve links ran off the dark header (white on the page) and pushed the page to 781 px."""
    b.job(name="a job with a long enough name to wrap", status="running")
    user_in_role(django_user_model, "pia", "admin")
    page.set_viewport_size(PHONE)
    log_in(page, live_server.url, "pia", path)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], "the page scrolls sideways"
    header = page.evaluate("(() => { const r = document.querySelector('header.top').getBoundingClientRect();"
                           " return [r.left, r.right, r.top, r.bottom]; })()")
    links = page.evaluate("[...document.querySelectorAll('nav a')].map(a => { const r = a.getBoundingClientRect();"
                          " return [a.textContent, r.left, r.right, r.top, r.bottom]; })")
    assert len(links) == 12  # Fleet ... Clusters and Admin
    outside = [name for name, left, right, top, bottom in links
               if left < header[0] or right > header[1] or top < header[2] or bottom > header[3]]
    assert outside == [], "links outside the dark header: white on the page"
    if path == "/jobs":  # the list keeps its key columns in view, not only its first
        cells = page.evaluate("[...document.querySelectorAll('#jobs-table tbody tr:first-child > *')]"
                              ".filter(c => c.offsetParent !== null).map(c => c.getBoundingClientRect().right)")
        assert len(cells) == 4 and max(cells) <= PHONE["width"], cells  # job, status, cost, Stop
        assert page.is_visible("#jobs-table tbody .job-status") and page.is_visible("#jobs-table tbody .job-cost")
    shot(page, output_dir, request, "phone")

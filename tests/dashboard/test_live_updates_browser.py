"""Live updates in Chromium, served by a real Daphne: costs, fleet cards, the Jobs list, a job's rewind.

The test publishes what the producers would (or runs the producer itself: the
attribute task, the telemetry broadcaster inside Daphne), and checks the page
changed in place: `window.__yardstickLoadedAt` stays what it was at load.
"""

from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal

import pytest

from costs.money import ipd_text
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import in_thread, log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import LiveStack, fresh_fleet_keys, live_web  # noqa: F401 - fixture
from tests.faults import DatabaseRelay
from yardstick.live import send_now

pytestmark = [pytest.mark.browser, pytest.mark.slow]

UTC = timezone.utc
LOADED_AT = "window.__yardstickLoadedAt"


def open_live(page, url, path):  # noqa: F811 - a page, not the fixture
    """Go to `path` (logged in) and wait until its socket is subscribed; return its load stamp."""
    record_events(page)
    page.goto(url + path)
    wait_subscribed(page)
    return page.evaluate(LOADED_AT)


def text_is(page, selector, expected):  # noqa: F811 - a page, not the fixture
    # Polled on a timer, not on animation frames: a page behind another tab may get no frames (CI timed out so).
    waited(page, "([s, t]) => document.querySelector(s)?.textContent.trim() === t", [selector, expected])


def waited(page, condition, arg):  # noqa: F811 - a page, not the fixture
    """page.wait_for_function(condition, arg), polled every 100 ms; on a timeout the failure says the last live
    events the page handled (was the event lost, or its handling wrong?)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, arg=arg, polling=100)
    except PlaywrightTimeout:
        seen = page.evaluate("JSON.stringify((window.__events || []).slice(-8).map(e => [e.topic, e.kind, e.data]))")
        raise AssertionError(f"{condition} never held for {arg!r}; the page's last live events: {seen[:3000]}") from None


def ticker(source):
    """tick(ago_s): `source` read as of ago_s seconds ago, written through the agent's writer on the test's
    connection (the broadcaster inside Daphne sends the newest sample to the page)."""
    from django.db import connection

    from collector.agent.batch import Batch
    from collector.agent.writer import Writer

    connection.ensure_connection()
    writer = Writer(connection.connection)

    def tick(ago_s):
        ts = datetime.now(UTC) - timedelta(seconds=ago_s)
        readings = source.read(ts)
        writer.write(Batch([r.device for r in readings], [(r.device.uuid, ts, *r.values) for r in readings]))

    return tick


def priced_running_job(name):
    """A running job that held its GPU, at $0.10 a device-minute, for the last closed minutes of today:
    (job, its open stint, (start, count, end) of those minutes)."""
    b.prices(per_hour="6.00", per_kwh="0", pue="1")
    gpu = b.device(b.node("gpu-a", team="infra"), 0)
    start, count, end = b.minutes_of_today()
    b.minutes(gpu, start, count, power_w=300)
    job = b.job(name=name, status="running")
    return job, b.stint(job, gpu, start), (start, count, end)


def test_a_cost_update_reaches_the_fleet_jobs_and_job_pages_without_a_reload(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    from costs.tasks import attribute
    from trainer.models import Step

    job, _, (start, count, end) = priced_running_job("priced live")
    Step.objects.create(job=job, step=0, at=start + timedelta(seconds=1), eval_pass1=30.0, metrics={"eval/pass1": 30.0})
    Step.objects.create(job=job, step=10, at=end - timedelta(seconds=1), eval_pass1=36.0, metrics={"eval/pass1": 36.0})
    cost = Decimal("0.10") * count
    dollars, ipd = f"${cost}", f"{ipd_text(6 / float(cost))} pts/$"  # as costs.money writes them
    per_point = f"${(cost / 6).quantize(Decimal('0.01'), ROUND_HALF_UP)} per point"

    user_in_role(django_user_model, "vera", "viewer", subprocess=True)
    log_in(page, live_web.url, "vera", "/")
    fleet = page
    jobs, one = page.context.new_page(), page.context.new_page()
    paths = {fleet: "/", jobs: "/jobs", one: f"/jobs/{job.pk}"}
    stamps = {p: open_live(p, live_web.url, path) for p, path in paths.items()}
    row = f'tr[data-job="{job.pk}"]'
    assert fleet.inner_text("#card-fleet-usd") == "$0.00", "nothing attributed yet"
    assert jobs.inner_text(f"{row} .job-cost") == one.inner_text("#job-cost") == "$0.00", "the same on both pages"
    assert one.inner_text("#job-cost") == "$0.00"

    summary = in_thread(attribute)  # the periodic task itself: attribute, check budgets, publish
    assert summary["jobs"] == [job.pk]

    text_is(fleet, "#card-fleet-usd", dollars)
    text_is(fleet, "#card-ipd", f"arithmetic {ipd}")  # the job's environment: its gain over its cost
    shown_at = fleet.inner_text("#card-ipd-as-of")
    assert shown_at in {(datetime.now(UTC) - timedelta(minutes=m)).strftime("%H:%M") for m in (0, 1)}
    text_is(jobs, f"{row} .job-cost", dollars)
    text_is(jobs, f"{row} .job-ipd", ipd)
    text_is(one, "#job-cost", dollars)
    text_is(one, "#job-ipd", ipd)
    text_is(one, "#job-ipd-hint", per_point)
    for p, stamp in stamps.items():
        assert p.evaluate(LOADED_AT) == stamp, "updated in place, not reloaded"
    shot(fleet, output_dir, request, "fleet")


def test_the_fleet_cards_follow_devices_going_idle_and_stale(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    # $2/h + kW x $0.10/kWh x PUE 1.5: 600 W costs $2.09/h, 100 W $2.015/h.
    b.prices(per_hour="2.00", per_kwh="0.10", pue="1.5")
    steady = b.device(b.node("gpu-a", interval_s=30), 0)
    quick = b.device(b.node("gpu-b", interval_s=1), 0)  # stale 3 s after its newest sample
    b.latest(steady, util_pct=90, power_w=600)
    user_in_role(django_user_model, "ian", "viewer", subprocess=True)
    log_in(page, live_web.url, "ian", "/")
    loaded = open_live(page, live_web.url, "/")
    cards = "['busy', 'idle', 'stale', 'burn'].map(k => document.getElementById('card-' + k).textContent).join(' ')"
    warn = "document.getElementById('card-stale').closest('.card').classList.contains('stat-warn')"
    assert page.evaluate(cards) == "1 0 1 $2.09", "gpu-b has never reported"
    # The node table's "now" columns share the cards' window, and follow it.
    row = "(n => ['util', 'power'].map(k => document.querySelector(`#node-table tr[data-node='${n}'] .node-${k}`)" \
          ".textContent).join(' '))"
    assert page.evaluate(f"{row}('gpu-a')") == "90% 600 W"
    assert page.evaluate(f"{row}('gpu-b')") == "— 0 W"

    # gpu-b reports (dated a little ahead, so it stays fresh long enough to be seen): idle.
    b.latest(quick, util_pct=5, power_w=100, ts=datetime.now(UTC) + timedelta(seconds=6))
    page.wait_for_function(f"{cards} === '1 1 0 $4.11'")  # 2.09 + 2.015 = 4.105, half up
    assert page.evaluate(warn) is False
    cell = ("(() => { const t = window.Yardstick.figs.heatmap.el.data[0];"
            " return t.z[t.y.indexOf('gpu-b')][0]; })()")
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')  # plotly.js runs once the page is live
    page.wait_for_function(f"{cell} === 5")
    page.wait_for_function(f"{row}('gpu-b') === '5% 100 W'")

    # Then it goes quiet: no new row at all, and still the cards move, and its heatmap cell blanks.
    page.wait_for_function(f"{cards} === '1 0 1 $2.09'", timeout=30_000)
    assert page.evaluate(warn) is True
    page.wait_for_function(f"{cell} === null")
    page.wait_for_function(f"{row}('gpu-b') === '— 0 W'")

    b.latest(steady, util_pct=2, power_w=1250)
    page.wait_for_function(f"{cards} === '0 1 1 $2.19'")  # $2 + 1.25 kW x $0.10 x 1.5 = $2.1875, half up
    page.wait_for_function(f"{row}('gpu-a') === '2% 1,250 W'")
    # The power chart spans the chosen range (1 h), its end at the newest frame, which is its last point.
    power = "window.Yardstick.figs.power.el"
    page.wait_for_function(f"{power}.data && Number({power}.data[0].y.at(-1)) === 1.25")
    ends = page.evaluate(f"(a => a.range.map(v => a.r2l(v)))({power}._fullLayout.xaxis)")
    newest = page.evaluate(f"Date.parse({power}.data[0].x.at(-1))")
    assert ends[1] - ends[0] == 3_600_000 and ends[1] >= newest > ends[1] - 60_000
    # Frames a second apart move its last point; it gains a point only every 5 s (1 h / 720).
    count = f"[{power}.data[0].x.length, window.__events.filter(e => e.kind === 'frame').length]"
    points, frames = page.evaluate(count)
    for watts in (1300, 1350, 1400, 1450):
        b.latest(steady, util_pct=2, power_w=watts)
        page.wait_for_function(f"Number({power}.data[0].y.at(-1)) === {watts / 1000}")
    points_after, frames_after = page.evaluate(count)
    assert frames_after - frames >= 4 and points_after - points <= 2
    assert page.evaluate(LOADED_AT) == loaded
    shot(page, output_dir, request, "cards")


def test_the_fleet_page_is_live_before_plotly_js_comes_and_draws_its_charts_when_it_does(  # noqa: F811
        fresh_fleet_keys, live_web, page, django_user_model):
    """plotly.js is 4.8 MB: the fleet page's cards, lists, node table and socket do not wait for it."""
    busy = b.device(b.node("gpu-a", interval_s=30), 0)
    b.latest(busy, util_pct=90, power_w=600)
    user_in_role(django_user_model, "pia", "viewer", subprocess=True)
    log_in(page, live_web.url, "pia", "/?live=0")
    held, sockets = [], []
    page.route("**/assets/plotly-*.min.js", lambda route: held.append(route))  # answered when the test says
    page.on("websocket", lambda ws: sockets.append(ws.url))
    record_events(page)
    page.goto(live_web.url + "/", wait_until="domcontentloaded")  # "load" waits for every script
    wait_subscribed(page)
    assert held and page.evaluate("window.Plotly === undefined"), "plotly.js held back"
    assert page.get_attribute("#live-state", "data-state") == "live"
    # The page has the layout it was rendered with: the socket's welcome is the whole frame alone.
    version = page.evaluate("window.Yardstick.fleet.layout.version")
    assert sockets and sockets[0].endswith(f"&layout={version}")
    in_thread(b.latest, busy, 3, 120)  # it goes idle: the cards and the idle list follow, no chart yet
    page.wait_for_function("document.getElementById('card-idle').textContent === '1'")
    page.wait_for_function("document.querySelector('.fleet-list[data-list=idle] li') !== null")
    assert page.get_attribute('.chart[data-fig="heatmap"]', "data-drawn") is None
    assert page.evaluate("window.__events.filter(e => e.kind === 'layout').length") == 0
    held[0].continue_()
    page.wait_for_selector('.chart[data-fig="heatmap"][data-drawn="true"]')
    page.wait_for_selector('.chart[data-fig="power"][data-drawn="true"]')
    assert page.evaluate("window.Yardstick.figs.heatmap.el.data[0].z[0][0]") == 3


@pytest.fixture
def web_behind_relay(transactional_db, tmp_path):
    """Daphne reaching the test database only through a relay the test can cut: (stack, relay)."""
    from django.db import connection

    relay = DatabaseRelay(connection.settings_dict).start()
    stack = LiveStack(tmp_path, worker=False, database=relay.url())
    try:
        yield stack.start(), relay
    finally:
        stack.stop()
        relay.stop()


def test_the_fleet_page_says_reconnecting_while_the_database_is_away_and_goes_on_by_itself(
        web_behind_relay, page, django_user_model, output_dir, request):  # noqa: F811
    web, relay = web_behind_relay
    b.prices(per_hour="2.00", per_kwh="0.10", pue="1.5")
    gpu = b.device(b.node("gpu-a", interval_s=30), 0)
    b.latest(gpu, util_pct=90, power_w=600)
    user_in_role(django_user_model, "otto", "viewer", subprocess=True)
    log_in(page, web.url, "otto", "/")
    loaded = open_live(page, web.url, "/")
    state = "document.getElementById('live-state')"
    assert page.evaluate(f"{state}.dataset.state") == "live"

    relay.cut()  # the web process can no longer reach PostgreSQL; its socket to the browser stays open
    page.wait_for_function(f"{state}.dataset.state === 'reconnecting'", timeout=20_000)
    assert page.evaluate(f"{state}.textContent") == "reconnecting: the database is not answering"
    # Not shot(): it pauses and resumes live, a new subscription; the page must recover without one.
    page.screenshot(path=str(output_dir / f"{request.node.name}-reconnecting.png"))
    b.latest(gpu, util_pct=4, power_w=100)  # the device went idle during the outage

    relay.restore()  # no reload, no new subscriber: the page picks up by itself
    page.wait_for_function(f"{state}.dataset.state === 'live'", timeout=20_000)
    text_is(page, "#card-idle", "1")
    text_is(page, "#card-busy", "0")
    assert page.evaluate(LOADED_AT) == loaded
    shot(page, output_dir, request, "back")


def progress(job, step, reward):
    return in_thread(send_now, "jobs", "progress", {"id": job.pk, "step": step, "steps": 100, "reward_mean": reward})


def test_a_jobs_row_grows_its_progress_and_sparkline_with_each_step(live_web, page, django_user_model,  # noqa: F811
                                                                    output_dir, request):
    from dashboard.readings import SPARK_POINTS

    running = b.job(name="growing", status="running")
    b.steps(running, 5)  # rewards 0.302 .. 0.310 at steps 1..5
    fresh = b.job(name="just started", status="running")
    user_in_role(django_user_model, "lena", "viewer", subprocess=True)
    log_in(page, live_web.url, "lena", "/jobs")
    loaded = open_live(page, live_web.url, "/jobs")
    row, new_row = f'tr[data-job="{running.pk}"]', f'tr[data-job="{fresh.pk}"]'
    spark = """(row) => { const cell = document.querySelector(row + ' .job-spark');
        const line = cell.querySelector('polyline');
        return {points: JSON.parse(cell.dataset.points),
                drawn: line ? line.getAttribute('points').split(' ').length : 0,
                progress: cell.closest('tr').querySelector('progress').value,
                text: cell.closest('tr').querySelector('.progress-text').textContent}; }"""
    assert page.evaluate(spark, row)["drawn"] == 5
    assert page.evaluate(spark, new_row)["drawn"] == 0 and page.inner_text(f"{new_row} .job-spark") == "—"

    for step in (6, 7, 8):
        assert progress(running, step, round(0.5 + step / 100, 4))
    page.wait_for_function(f"({spark})('{row}').drawn === 8")
    now = page.evaluate(spark, row)
    assert now["points"][-3:] == [[6, 0.56], [7, 0.57], [8, 0.58]]
    assert (now["progress"], now["text"]) == (8, "8 / 100")

    for step in (1, 2):
        assert progress(fresh, step, 0.1 * step)
    page.wait_for_function(f"({spark})('{new_row}').drawn === 2")

    for step in range(9, 91):
        assert progress(running, step, round(0.5 + step / 1000, 4))
    page.wait_for_function(f"({spark})('{row}').text === '90 / 100'")
    done = page.evaluate(spark, row)
    assert len(done["points"]) <= SPARK_POINTS and done["drawn"] == len(done["points"])
    assert done["points"][-1] == [90, 0.59] and done["points"][0][0] < 10, "the whole run, thinned"
    assert page.evaluate(LOADED_AT) == loaded
    shot(page, output_dir, request, "jobs")


def step(job, n, reward):
    metrics = {"train/reward_mean": reward, "train/reward_std": 0.01, "performance/gen_tokens_per_s": 100.0 * n}
    return in_thread(send_now, f"job.{job.pk}", "step", {"job": job.pk, "step": n, "steps": 100, "metrics": metrics})


def test_a_rewind_truncates_the_job_charts_and_the_re_run_steps_replace_the_old_ones(live_web, page,  # noqa: F811
                                                                                       django_user_model, output_dir,
                                                                                       request):
    from trainer.models import Job

    job = b.job(name="resumed", status="running")
    user_in_role(django_user_model, "rita", "viewer", subprocess=True)
    log_in(page, live_web.url, "rita", f"/jobs/{job.pk}")
    loaded = open_live(page, live_web.url, f"/jobs/{job.pk}")
    reward = "document.querySelector('[data-fig=reward]').data?.[2]"  # drawn with its first point
    xs = f"JSON.stringify({reward}?.x)"
    every_live_trace = """() => ['reward', 'throughput', 'timing', 'losses'].flatMap(k => {
        const el = document.querySelector('[data-fig=' + k + ']');
        return window.Yardstick.figs[k].live.traces.map(t => el.data ? el.data[t.trace].x.length : 0); })"""

    for n in range(1, 6):
        assert step(job, n, 0.1 * n)
    page.wait_for_function(f"{xs} === '[1,2,3,4,5]'")
    assert set(page.evaluate(every_live_trace)) - {0} == {5}  # eval pass@1 has no points (no eval)

    assert in_thread(send_now, f"job.{job.pk}", "rewind", {"job": job.pk, "through": 2})
    page.wait_for_function(f"{xs} === '[1,2]'")
    assert set(page.evaluate(every_live_trace)) - {0} == {2}, "every live trace"
    assert page.inner_text("#steps-done") == "2"

    assert step(job, 3, 0.9)
    page.wait_for_function(f"{xs} === '[1,2,3]'")
    assert page.evaluate(f"{reward}.y") == [0.1, 0.2, 0.9], "step 3 as it ran again, not as it first did"

    # Missed while the socket was down: the job now reports fewer steps done than the page shows.
    Job.objects.filter(pk=job.pk).update(steps_done=1)
    page.evaluate("window.Yardstick.setLive(false); window.Yardstick.setLive(true)")
    wait_subscribed(page, times=2)
    page.wait_for_function(f"{xs} === '[1]'")
    assert page.inner_text("#steps-done") == "1"
    assert page.evaluate(LOADED_AT) == loaded
    shot(page, output_dir, request, "rewound")


def test_the_workers_phase_shows_beside_the_status_and_follows_it_live(live_web, page, django_user_model,  # noqa: F811
                                                                     output_dir, request):
    from trainer.models import Job

    job = b.job(name="first on its env", status="running")
    building = "building the base policy for arithmetic (first job on it here; until pass@1 reaches 30%)"
    Job.objects.filter(pk=job.pk).update(phase=building)
    user_in_role(django_user_model, "pia", "viewer", subprocess=True)
    log_in(page, live_web.url, "pia", "/jobs")
    listing = page
    one = page.context.new_page()
    stamps = {listing: open_live(listing, live_web.url, "/jobs"), one: open_live(one, live_web.url, f"/jobs/{job.pk}")}
    cell = f'tr[data-job="{job.pk}"] .job-phase'
    assert listing.inner_text(cell) == building and one.inner_text("#job-phase") == building

    # What the runner does: write the phase, then publish it.
    later = building + ": step 120 of at most 1500, pass@1 12%"
    Job.objects.filter(pk=job.pk).update(phase=later)
    assert in_thread(send_now, "jobs", "phase", {"id": job.pk, "phase": later})
    text_is(listing, cell, later)
    text_is(one, "#job-phase", later)
    shot(one, output_dir, request, "job-building-base")
    wait_subscribed(one, times=2)  # the screenshot paused live; it is back

    Job.objects.filter(pk=job.pk).update(status="completed", phase="")
    assert in_thread(send_now, "jobs", "status", {"id": job.pk, "status": "completed", "phase": "", "steps_done": 100,
                                                  "steps": 100})
    for p, selector in ((listing, cell), (one, "#job-phase")):
        waited(p, "(s) => document.querySelector(s).hidden", selector)
        assert p.evaluate(LOADED_AT) == stamps[p]


def finish_as_the_worker_does(job, stint, status, reason):
    """End the stint, then the job, in one transaction (trainer.runner.run's way out)."""
    from django.db import transaction

    with transaction.atomic():
        stint.end(status, job.steps_done)
        job.finish(status, reason)


def test_a_running_jobs_page_follows_its_baseline_costs_samples_and_end_without_a_reload(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    from costs.intelligence import job_intelligence
    from costs.tasks import attribute
    from trainer.models import Job, Sample, Step

    job, stint, (start, count, end) = priced_running_job("followed")
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    log_in(page, live_web.url, "olga", f"/jobs/{job.pk}")
    record_events(page)
    with page.expect_navigation():
        page.click("form.job-stop-form button")  # POST, then back to this page with the message
    wait_subscribed(page)
    listing = page.context.new_page()
    stamps = {page: page.evaluate(LOADED_AT), listing: open_live(listing, live_web.url, "/jobs")}
    row = f'tr[data-job="{job.pk}"]'
    assert listing.is_hidden(f"{row} form.job-stop-form") and listing.is_hidden(f"{row} form.job-resume-form")
    flash = ".messages li"
    assert page.inner_text(flash) == f"Job {job.pk} is stopping."
    assert page.is_hidden("form.job-stop-form") and page.is_hidden("form.job-resume-form")
    assert page.inner_text("#baseline-pass1") == "—" and page.inner_text("#job-usd-per-mtok") == "—"
    assert page.inner_text("#stints-body td:nth-child(4)").strip() == "running"
    history_rows = page.locator("#history-body tr").count()

    # What the runner does at step 0 (the baseline) and step 1: write the rows, then publish.
    Step.objects.create(job=job, step=0, at=start + timedelta(seconds=1), eval_pass1=30.0, metrics={"eval/pass1": 30.0})
    assert in_thread(send_now, f"job.{job.pk}", "step", {"job": job.pk, "step": 0, "steps": 100,
                                                          "metrics": {"eval/pass1": 30.0}, "samples": []})
    text_is(page, "#baseline-pass1", "30.0")
    text_is(page, "[data-fig=throughput] .chart-empty p", "No training step yet")
    metrics = {"train/reward_mean": 0.5, "eval/pass1": 36.0, "performance/gen_tokens": 200_000}
    Step.objects.create(job=job, step=1, at=end - timedelta(seconds=1), eval_pass1=36.0, gen_tokens=200_000,
                        metrics=metrics)
    kept = Sample.objects.create(job=job, step=1, index=0, prompt="<b>12</b>+30=", completion="42", reward=1.0,
                                 advantage=0.5)
    assert in_thread(send_now, f"job.{job.pk}", "step", {"job": job.pk, "step": 1, "steps": 100,
                                                          "metrics": metrics, "samples": [kept.to_dict()]})
    text_is(page, "#samples-body td:nth-child(2)", "<b>12</b>+30=")  # as text, not markup
    assert page.input_value("#step-pick") == "1" and page.inner_text("#samples-range") == "steps 1–1 kept rollouts"

    assert page.locator("[data-fig=cost] .chart-empty").is_visible(), "no eval with a cost yet"
    in_thread(attribute)  # the periodic task: attribute, then publish the "costs" event
    intel = job_intelligence(job)
    # $0.10 a minute for 0.2 M tokens: $1.50 per 1M for 3 minutes (fewer in the day's first minutes).
    per_mtok = f"{Decimal('0.10') * count / Decimal('0.2'):.2f}"
    assert intel["usd_per_million_tokens"] == per_mtok
    text_is(page, "#job-usd-per-mtok", f"${per_mtok}")
    text_is(page, "#job-tokens-hint", f"{intel['tokens_per_joule']:.2f} tokens/J")
    page.wait_for_function("document.querySelector('[data-fig=cost]').data?.[0].x.length === 2")
    assert page.evaluate("document.querySelector('[data-fig=cost]').data[0].x") == [0, 1]

    in_thread(finish_as_the_worker_does, job, stint, "stopped", "stopped at step 1")
    page.wait_for_function(f"document.querySelectorAll('#history-body tr').length === {history_rows + 1}")
    last = page.locator("#history-body tr").last
    assert last.inner_text().split("\t")[1:] == ["stopping", "■ stopped", "stopped at step 1"]
    page.wait_for_function("!document.querySelector('#stints-body').textContent.includes('running')")
    stint.refresh_from_db()
    assert page.inner_text("#stints-body td:nth-child(4)").strip() == \
        stint.ended_at.strftime("%Y-%m-%d %H:%M:%S") + " stopped"
    assert page.locator(flash).count() == 0, "the job is no longer stopping"
    assert page.is_visible("form.job-resume-form") and page.is_hidden("form.job-stop-form")
    listing.wait_for_selector(f"{row} form.job-resume-form", state="visible")
    assert listing.is_hidden(f"{row} form.job-stop-form")
    assert Job.objects.get(pk=job.pk).status == "stopped"
    for p, stamp in stamps.items():
        assert p.evaluate(LOADED_AT) == stamp, "updated in place, not reloaded"
    shot(page, output_dir, request, "ended")


def test_the_fleet_node_tables_newest_sample_ages_with_the_clock_and_a_new_sample_resets_it(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    gpu = b.device(b.node("gpu-a", interval_s=30), 0)
    newest = datetime.now(UTC) - timedelta(seconds=5)
    b.latest(gpu, util_pct=50, power_w=300, ts=newest)
    user_in_role(django_user_model, "nia", "viewer", subprocess=True)
    log_in(page, live_web.url, "nia", "/")
    loaded = open_live(page, live_web.url, "/")
    cell = '#node-table .newest-age[data-node="gpu-a"]'
    seconds = f"parseInt(document.querySelector('{cell}').textContent)"
    first = page.evaluate(seconds)
    assert 4 <= first <= (datetime.now(UTC) - newest).total_seconds() + 1
    assert page.inner_text(cell).endswith(" s ago")
    page.wait_for_function(f"{seconds} >= {first + 2}")  # no new sample: the clock moves it

    b.latest(gpu, util_pct=60, power_w=310)
    page.wait_for_function(f"{seconds} <= 2")
    assert page.evaluate(LOADED_AT) == loaded


def test_while_the_base_policy_is_built_the_charts_say_so_instead_of_drawing_empty_axes(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    from costs.tasks import attribute
    from trainer.models import Job, Step

    job, _, (start, _, _) = priced_running_job("first on its env")
    building = "building the base policy for arithmetic (first job on it here; until pass@1 reaches 30%)"
    Job.objects.filter(pk=job.pk).update(phase=building)
    user_in_role(django_user_model, "bea", "viewer", subprocess=True)
    log_in(page, live_web.url, "bea", f"/jobs/{job.pk}")
    loaded = open_live(page, live_web.url, f"/jobs/{job.pk}")
    for key in ("reward", "throughput", "timing", "losses"):
        chart = f"[data-fig={key}]"
        assert page.inner_text(f"{chart} .chart-empty p") == building[0].upper() + building[1:] + "…"
        assert page.locator(f"{chart} .main-svg").count() == 0, "no plotly axes"
    assert page.inner_text("[data-fig=cost] .chart-empty p") == "No eval with a cost yet"
    assert page.inner_text("#job-base-build").startswith("includes the base-policy build now running")
    shot(page, output_dir, request, "building")
    wait_subscribed(page, times=2)

    later = building + ": step 120 of at most 1500, pass@1 12%"
    Job.objects.filter(pk=job.pk).update(phase=later)  # what the runner does: write the phase, then publish it
    assert in_thread(send_now, "jobs", "phase", {"id": job.pk, "phase": later})
    text_is(page, "[data-fig=reward] .chart-empty p", "B" + later[1:] + "…")

    assert step(job, 1, 0.25)
    page.wait_for_function("document.querySelector('[data-fig=reward]').data?.[2].x.length === 1")
    assert page.locator("[data-fig=reward] .chart-empty").count() == 0
    assert page.locator("[data-fig=reward] .main-svg").count() > 0

    # Built in 30 s of the first minute, held all of it at $0.10 a minute: $0.05, as the runner records it
    # with the baseline; the next attribution's costs event says so beside the cost.
    Job.objects.filter(pk=job.pk).update(phase="training")
    Step.objects.create(job=job, step=0, at=start + timedelta(seconds=40), eval_pass1=30.0,
                        metrics={"eval/pass1": 30.0, "base/build_started_at": start.timestamp() + 5,
                                 "base/build_s": 30.0})
    in_thread(attribute)
    text_is(page, "#job-base-build",
            "includes $0.05 / 30 s building the base policy (shared by later jobs on arithmetic)")
    assert page.evaluate(LOADED_AT) == loaded


def test_stop_and_resume_follow_the_status_events_can_stop_and_can_resume_not_the_status_name(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    job = b.job(name="on a missing device", status="running")
    user_in_role(django_user_model, "otto", "operator", subprocess=True)
    log_in(page, live_web.url, "otto", "/jobs")
    listing = page
    one = page.context.new_page()
    for p, path in ((listing, "/jobs"), (one, f"/jobs/{job.pk}")):
        open_live(p, live_web.url, path)
    row = f'tr[data-job="{job.pk}"] '
    assert listing.is_visible(row + "form.job-stop-form") and one.is_visible("form.job-stop-form")

    # Failed, but a resume cannot help (Job.can_resume says no): Resume stays hidden, Stop goes.
    assert in_thread(send_now, "jobs", "status", {"id": job.pk, "status": "failed", "phase": "", "steps_done": 0,
                                                  "steps": 100, "can_stop": False, "can_resume": False})
    for p, scope in ((listing, row), (one, "")):
        p.wait_for_selector(scope + "form.job-stop-form", state="hidden")
        assert p.is_hidden(scope + "form.job-resume-form")

    assert in_thread(send_now, "jobs", "status", {"id": job.pk, "status": "failed", "phase": "", "steps_done": 0,
                                                  "steps": 100, "can_stop": False, "can_resume": True})
    for p, scope in ((listing, row), (one, "")):
        p.wait_for_selector(scope + "form.job-resume-form", state="visible")


def test_a_cpu_nodes_charts_of_what_it_does_not_report_keep_saying_so_as_samples_arrive(  # noqa: F811
        live_web, page, django_user_model):
    """This machine's CPU as the host source reads it (no SM activity): the SM chart says "not reported by this
    device", and keeps saying it when the next samples arrive live (they cleared the note: a blank box)."""
    from collector.agent.sources.host import HostSource

    tick = ticker(HostSource("cpu-live"))
    tick(3)
    tick(2)
    user_in_role(django_user_model, "cai", "viewer", subprocess=True)
    log_in(page, live_web.url, "cai", "/")
    loaded = open_live(page, live_web.url, "/nodes/cpu-live")
    note = "(document.querySelector('[data-fig=\"sm\"]').layout.annotations || []).map(a => a.text)"
    assert page.evaluate(note) == ["SM activity: not reported by this device"]
    points = "document.querySelector('[data-fig=\"util\"]').data[0].x.length"
    before = page.evaluate(points)
    tick(0)  # the broadcaster inside Daphne sends it
    page.wait_for_function(f"{points} > {before}")
    page.wait_for_timeout(500)  # the SM chart's null points are drawn in the same flush
    assert page.evaluate(note) == ["SM activity: not reported by this device"]
    assert page.evaluate(LOADED_AT) == loaded


def test_the_node_page_grows_its_nvlink_total_power_limit_and_clock_reasons_timeline_live(  # noqa: F811
        live_web, page, django_user_model, output_dir, request):
    """Samples written by the real NVML source (over the fake pynvml's Hopper profile) and the agent's writer; the
    broadcaster inside Daphne sends the third, and the charts take it without a reload."""
    import sys
    from pathlib import Path

    from collector.agent.sources.nvml import NvmlSource

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collector"))
    import fake_pynvml
    from fake_pynvml import FakeGpu, FakeNvml

    gpus = [FakeGpu.hopper("GPU-live-0"), FakeGpu.hopper("GPU-live-1")]
    write = ticker(NvmlSource("hgx-live", nvml=FakeNvml(gpus)))

    def tick(ago_s):
        write(ago_s)
        for g in gpus:
            g.clock_us += 1_000_000
            g.nvlink_tx_kib += 1024
            g.nvlink_rx_kib += 2048

    tick(3)
    tick(2)
    user_in_role(django_user_model, "nia", "viewer", subprocess=True)
    log_in(page, live_web.url, "nia", "/")
    loaded = open_live(page, live_web.url, "/nodes/hgx-live")
    fig = "document.querySelector('[data-fig=\"{}\"]').data"
    assert page.evaluate(fig.format("nvlink_tx") + "[2].name") == "node total"
    assert page.evaluate(fig.format("nvlink_tx") + "[2].y") == [2 * 1024 * 1024]
    assert page.evaluate(fig.format("throttle") + "[0].y") == [None, None], "GPU 0 not held down yet"

    gpus[0].clocks_event_reasons = fake_pynvml.nvmlClocksEventReasonSwPowerCap
    gpus[0].power_limit_mw = 450_000
    tick(0)
    page.wait_for_function(fig.format("nvlink_tx") + "[2].y.length === 2")
    assert page.evaluate(fig.format("nvlink_tx") + "[2].y") == [2 * 1024 * 1024] * 2
    assert page.evaluate(fig.format("nvlink_rx") + "[2].y[1]") == 4 * 1024 * 1024
    page.wait_for_function(fig.format("throttle") + "[0].y.filter(Boolean).length === 1")
    assert page.evaluate(fig.format("throttle") + "[0].y.filter(Boolean)") == ["GPU 0 · power cap"]
    assert page.evaluate(fig.format("throttle") + "[4].y.filter(Boolean).length") == 0, "GPU 1 not held down"
    limits = page.evaluate(f"{fig.format('power')}.filter(t => t.name === 'GPU 0 power limit')[0].y")
    assert limits[-1] == 450.0
    # Each chart spans the chosen range (1 h), not its three seconds of samples, and ends at the newest.
    for key in ("util", "nvlink_tx", "throttle"):
        ends = page.evaluate(f"(a => a.range.map(v => a.r2l(v)))("
                             f"document.querySelector('[data-fig=\"{key}\"]')._fullLayout.xaxis)")
        newest = page.evaluate(f"Date.parse({fig.format(key)}[0].x.at(-1))")
        assert ends[1] - ends[0] == 3_600_000 and ends[1] >= newest > ends[1] - 60_000, key
    assert page.evaluate(LOADED_AT) == loaded
    shot(page, output_dir, request, "live")


def test_a_job_stopped_while_building_its_base_policy_stops_saying_the_build_is_running(  # noqa: F811
        live_web, page, django_user_model):
    from trainer.models import Job

    job = b.job(name="first on its env", status="running")
    building = "building the base policy for arithmetic (first job on it here; until pass@1 reaches 30%)"
    Job.objects.filter(pk=job.pk).update(phase=building)
    user_in_role(django_user_model, "ben", "viewer", subprocess=True)
    log_in(page, live_web.url, "ben", f"/jobs/{job.pk}")
    loaded = open_live(page, live_web.url, f"/jobs/{job.pk}")
    assert page.inner_text("#job-base-build").startswith("includes the base-policy build now running")

    later = building + ": step 120 of at most 1500, pass@1 12%"
    Job.objects.filter(pk=job.pk).update(phase=later)  # still building: still true
    assert in_thread(send_now, "jobs", "phase", {"id": job.pk, "phase": later})
    text_is(page, "#job-phase", later)
    assert page.inner_text("#job-base-build").startswith("includes the base-policy build now running")

    Job.objects.filter(pk=job.pk).update(status="stopped", phase="")  # what finish writes, then announces
    assert in_thread(send_now, "jobs", "status", {"id": job.pk, "status": "stopped", "phase": "", "steps_done": 0,
                                                  "steps": 100})
    text_is(page, "#job-base-build", "")
    assert page.get_attribute("#job-base-build", "data-while-phase") is None
    assert page.evaluate(LOADED_AT) == loaded

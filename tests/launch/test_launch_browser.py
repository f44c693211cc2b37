"""Launched jobs in Chromium, on a real launch worker, with Daphne serving the pages and their socket: an operator
picks a recipe on the Start form and fills its parameters (one out of bounds first), launches it, and reads its
output arrive on the job page: the tail followed, held still once scrolled up (with a jump control), searched on
the server, downloaded, its progress bar as the last line; the dropped-lines marker of a capped log; Restart of a
run without a checkpoint, offered live where it ended, in the job page and in the jobs list."""

import sys

import pytest

from launch.models import Launch, OutputLine
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.waiting import wait_for
from trainer.models import Job

PY = sys.executable
pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Prints a numbered line every 50 ms (a warning on stderr every 25th) until there are `steps` of them or its
# output directory holds "quiet"; then draws a progress bar in place, and ends once the folder holds "finish".
COUNTER = """import os, sys, time
n, label, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3]
i = 0
while i < n and not os.path.exists(os.path.join(folder, 'quiet')):
    i += 1
    print('step %d of %d label=%s' % (i, n, label), flush=True)
    if i % 25 == 0:
        print('warning: slow batch %05d' % i, file=sys.stderr, flush=True)
    time.sleep(0.05)
for k in (1, 2, 3):
    sys.stdout.write('\\rloading shards %d/4' % k)
    sys.stdout.flush()
    time.sleep(0.3)
while not os.path.exists(os.path.join(folder, 'finish')):
    time.sleep(0.1)
print()
print('done after %d steps' % i, flush=True)
"""
COUNTER_PARAMS = [
    {"name": "steps", "kind": "integer", "default": 100, "minimum": 1, "maximum": 100000, "help": "lines to print"},
    {"name": "label", "kind": "string", "default": "demo", "pattern": "[a-z -]+", "help": "a tag on every line"},
    {"name": "pace", "kind": "choice", "choices": ["steady", "bursty"], "default": "steady", "help": "how it prints"},
]

VIEW = "document.getElementById('output-lines')"
AT_BOTTOM = f"(() => {{ const v = {VIEW}; return v.scrollHeight - v.scrollTop - v.clientHeight <= 4; }})()"
# The number of the line at the top of the view: what a person scrolled up is reading.
TOP_SEQ = f"""(() => {{ const v = {VIEW}, r = v.getBoundingClientRect();
  const el = document.elementFromPoint(r.left + 80, r.top + 12).closest('.line'); return el && Number(el.dataset.seq); }})()"""
LINES = f"{VIEW}.querySelectorAll(':scope > .line').length"


def job_dir(settings, job_id):
    return settings.DATA_DIR / "launched" / f"job-{job_id}"


def touch(settings, job_id, name):
    folder = job_dir(settings, job_id)
    wait_for(folder.is_dir, what=f"job {job_id}'s output directory")
    (folder / name).write_text("")


def test_an_operator_launches_a_recipe_from_the_form_and_reads_its_output_live(  # noqa: F811
        launch_worker, recipe, live_web, page, django_user_model, settings, output_dir, request):
    recipe("counter", [PY, "-c", COUNTER, "{steps}", "{label}", "{job_dir}"], params=COUNTER_PARAMS,
           devices={"kind": "cuda", "count": 1}, description="prints numbered lines, some on stderr", stop_grace_s=[2, 2])
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    base = live_web.url
    log_in(page, base, "olga", "/jobs")

    page.click("details#start summary")
    assert page.locator("#f-counter-steps").is_hidden(), "a recipe's fields show once it is picked"
    assert page.inner_text('label[for="f-name"]') == "Name *"
    page.select_option("#f-what", "recipe:counter")
    assert page.inner_text('label[for="f-name"]') == "Name" and not page.evaluate("document.getElementById('f-name').required")
    assert page.inner_text(".field:has(#f-name) .hint") == "empty: the recipe's name"
    assert page.locator("#f-counter-steps").get_attribute("type") == "number"
    assert (page.locator("#f-counter-steps").get_attribute("min"), page.locator("#f-counter-steps").get_attribute("max")) == (
        "1", "100000")
    assert "lines to print · integer from 1 to 100000" in page.inner_text('.field[data-param="steps"] .hint')
    assert page.locator("#f-preset").is_hidden() and page.locator("#f-counter-pace").evaluate("e => e.tagName") == "SELECT"
    worker = page.locator(f'#workers tr[data-worker="launch@{settings.YARDSTICK_NODE}"]')
    assert "GPUs 0, 1 of 2" in worker.locator(".worker-free").inner_text().replace("\n", " ")
    page.fill("#f-name", "counting")
    page.fill("#f-team", "research")
    page.fill("#f-counter-steps", "0")
    page.fill("#f-counter-label", "from the form")
    page.select_option("#f-counter-pace", "bursty")
    shot(page, output_dir, request, "form")
    page.click("#start-submit")

    # Refused at once: the parameter named beside its input, everything typed still there, nothing started.
    page.wait_for_selector("#e-f-counter-steps")
    assert page.inner_text("#e-f-counter-steps") == "params.steps must be from 1 to 100000, got 0"
    assert page.locator("#f-counter-steps").input_value() == "0"
    assert page.locator("#f-counter-label").input_value() == "from the form"
    assert page.locator("#f-counter-pace").input_value() == "bursty"
    assert page.locator("#f-name").input_value() == "counting" and page.locator("#f-what").input_value() == "recipe:counter"
    assert "params.steps must be from 1 to 100000" in page.inner_text("#start-errors")
    shot(page, output_dir, request, "refused")
    page.set_viewport_size({"width": 900, "height": 900})
    shot(page, output_dir, request, "refused-900")
    page.set_viewport_size({"width": 1440, "height": 900})
    assert not Job.objects.exists()

    record_events(page)
    page.fill("#f-counter-steps", "4000")
    page.click("#start-submit")
    page.wait_for_url(base + "/jobs/*")
    job = Job.objects.get()
    assert (job.name, job.source, job.launch.values) == ("counting", "launched", {"steps": 4000, "label": "from the form",
                                                                                   "pace": "bursty"})
    wait_subscribed(page)
    loaded_at = page.evaluate("window.__yardstickLoadedAt")

    # Lines arrive live and the view follows the newest.
    page.wait_for_function(f"{LINES} >= 40", timeout=30_000)
    first = page.evaluate(LINES)
    page.wait_for_function(f"{LINES} >= {first + 20}")
    assert page.evaluate(AT_BOTTOM), "the view follows the tail"
    assert page.inner_text("#output-state") == "Following the newest line." and page.locator("#output-jump").is_hidden()
    started = page.locator("#output-lines .line[data-stream='yardstick']").first
    assert "started on" in started.inner_text() and started.locator(".st").inner_text() == "◆"
    page.wait_for_selector("#output-lines .line[data-stream='stderr']")
    warning = page.locator("#output-lines .line[data-stream='stderr']").first
    assert warning.locator(".st").inner_text() == "err" and "warning: slow batch" in warning.inner_text()
    assert warning.evaluate("e => getComputedStyle(e.querySelector('.tx')).color") != \
        started.evaluate("e => getComputedStyle(e.querySelector('.tx')).color")

    # Scrolled up, it holds still: new lines wait below, counted on the jump control.
    page.hover("#output-lines")
    page.mouse.wheel(0, -600)
    page.wait_for_selector("#output-jump:visible")
    held_at, top = page.evaluate(f"{VIEW}.scrollTop"), page.evaluate(TOP_SEQ)
    page.wait_for_function("/^([2-9]\\d|\\d{3,}) new lines — jump to latest$/.test(document.getElementById('output-jump').textContent)")
    assert page.evaluate(f"{VIEW}.scrollTop") == held_at and page.evaluate(TOP_SEQ) == top, "new lines did not move it"
    assert page.inner_text("#output-state").startswith("Paused while you read: new lines wait below")
    shot(page, output_dir, request, "paused")
    page.click("#output-jump")
    assert page.evaluate(AT_BOTTOM) and page.locator("#output-jump").is_hidden()
    page.wait_for_function(f"{LINES} >= {page.evaluate(LINES) + 10}")
    assert page.evaluate(AT_BOTTOM), "following again"

    # Search asks the server about every kept line; clearing returns to the live tail.
    wait_for(lambda: OutputLine.objects.filter(job=job, text="warning: slow batch 00050").exists(), what="batch 50")
    seq = OutputLine.objects.get(job=job, text="warning: slow batch 00050").seq
    page.fill("#output-q", "SLOW BATCH 00050")
    page.press("#output-q", "Enter")
    page.wait_for_selector("#output-results .line")
    found = page.locator("#output-results .line")
    assert found.count() == 1 and found.locator(".ln").inner_text() == str(seq)
    assert found.locator("mark").inner_text() == "slow batch 00050" and found.get_attribute("data-stream") == "stderr"
    assert page.locator("#output-lines").is_hidden()
    assert page.inner_text("#output-state").startswith("1 kept line contains “SLOW BATCH 00050”; new ones join")
    shot(page, output_dir, request, "search")
    # Its number shows the lines around it, from the server; Back returns to the matches.
    found.locator("button.ln-link").click()
    page.wait_for_selector("#output-results .line.target")
    target = page.locator("#output-results .line.target")
    assert target.get_attribute("data-seq") == str(seq) and target.get_attribute("aria-current") == "true"
    around = [int(s) for s in page.locator("#output-results .line").evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert around == list(range(seq - 30, seq + 31)) or around[:31] == list(range(seq - 30, seq + 1))
    assert page.inner_text("#output-state").startswith(f"Lines {seq - 30}–")
    assert target.evaluate("(t) => { const r = t.getBoundingClientRect(), v = t.parentElement.getBoundingClientRect(); "
                           "return r.top >= v.top && r.bottom <= v.bottom; }"), "the line asked for is in sight"
    shot(page, output_dir, request, "context")
    page.click("#output-results .output-back")
    assert page.locator("#output-results .line").count() == 1 and page.locator("#output-results .line.target").count() == 0
    page.click("#output-clear")
    assert page.locator("#output-results").is_hidden() and page.locator("#output-lines").is_visible()
    page.wait_for_function(AT_BOTTOM)

    # The line being written now (a progress bar, redrawn in place) is the last line.
    touch(settings, job.pk, "quiet")
    page.wait_for_function("document.querySelector('#output-partial .tx')?.textContent === 'loading shards 3/4'")
    assert page.evaluate(f"{VIEW}.lastElementChild.id") == "output-partial"
    shot(page, output_dir, request, "partial")

    with page.expect_download() as download:
        page.click("#output-download")
    text = open(download.value.path()).read()
    assert download.value.suggested_filename == f"job-{job.pk}-output.txt"
    assert "step 1 of 4000 label=from the form\n" in text and "warning: slow batch 00050\n" in text
    assert text.startswith("[yardstick] started on")

    # The launch card: the recipe version, the exact argv (one item an argument), the names set, the GPU given.
    argv = page.locator("#launch-argv li code")
    assert [argv.nth(i).text_content() for i in range(argv.count())] == [
        PY, "-c", COUNTER, "4000", "from the form", str(job_dir(settings, job.pk))]
    env = page.inner_text("#launch-env")
    assert "MLFLOW_TRACKING_TOKEN" in env and "CUDA_VISIBLE_DEVICES" in env and "DATABASE_URL" not in env
    assert page.inner_text("#launch-recipe").startswith("counter version 1")
    assert " ".join(page.inner_text("#launch-devices").split()) == (
        f"asked for 1 × GPU; given GPU 0 (NVML index) on worker launch@{settings.YARDSTICK_NODE}, node {settings.YARDSTICK_NODE}")

    touch(settings, job.pk, "finish")
    page.wait_for_selector("#job-status .status[data-status='completed']", timeout=30_000)
    page.wait_for_selector("#launch-exit")
    assert page.inner_text("#launch-exit") == "0 (success)"
    assert "none: nobody stopped it" in page.inner_text("#launch-stop-step")
    page.wait_for_function(f"Array.from({VIEW}.querySelectorAll(':scope > .line .tx')).pop().textContent"
                           ".startsWith('ended completed')")
    assert page.locator("#output-partial .line").count() == 0, "no line is being written once it ended"
    tail = page.locator("#output-lines > .line")
    assert "done after" in tail.nth(tail.count() - 2).inner_text()
    assert page.evaluate("window.__yardstickLoadedAt") == loaded_at, "all of it without a reload"
    shot(page, output_dir, request, "ended")


def test_a_capped_log_says_how_many_lines_it_dropped(  # noqa: F811
        launch_worker, recipe, live_server, page, django_user_model, settings, operator, output_dir, request):
    from launch import kind

    settings.LAUNCH_OUTPUT_MAX_MB = 1  # the worker and the pages (this process's server) cap at 1 MiB
    recipe("chatty", [PY, "-c", "for i in range(20000): print('line %06d ' % i + 'x' * 60)"])
    job = kind.start(recipe="chatty", team="research", created_by=operator)
    wait_for(lambda: Job.objects.filter(pk=job.pk, status="completed").exists(), what="the chatty job to end")
    dropped = Launch.objects.get(pk=job.pk).output_dropped
    assert dropped > 0
    user_in_role(django_user_model, "vera", "viewer")
    log_in(page, live_server.url, "vera", f"/jobs/{job.pk}?live=0")
    assert page.inner_text("#output-marker") == f"… {dropped:,} earlier lines dropped: the log keeps the newest 1 MiB"
    page.wait_for_selector("#output-lines > .line")
    assert page.locator("#output-lines > .line").count() == 1000
    assert "ended completed" in page.locator("#output-lines > .line").last.inner_text()
    note = page.inner_text("#output-loading")
    kept = Launch.objects.get(pk=job.pk).output_seq - dropped
    assert note == f"{kept - 1000:,} earlier lines kept but not shown here: search them, or download the whole log."
    assert page.inner_text("#output-count") == f"{kept:,} lines kept"
    shot(page, output_dir, request, "marker")


# Fails (no checkpoint, no resume arguments) once its output directory holds "fail".
FAILS_LATER = ("import os, sys, time\nprint('waiting', flush=True)\n"
               "while not os.path.exists(os.path.join(sys.argv[1], 'fail')): time.sleep(0.1)\n"
               "raise SystemExit('the reward model is gone')")


def test_restart_appears_where_a_run_without_a_checkpoint_ended_and_starts_a_new_job(  # noqa: F811
        launch_worker, recipe, live_web, page, django_user_model, settings, output_dir, request):
    recipe("fails-later", [PY, "-c", FAILS_LATER, "{job_dir}"], devices={"kind": "cuda", "count": 1},
           params=[{"name": "tries", "kind": "integer", "default": 1, "minimum": 1}])
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    base = live_web.url
    log_in(page, base, "olga", "/jobs?what=recipe:fails-later")
    page.fill("#f-name", "flaky")
    page.fill("#f-team", "research")
    page.fill("#f-fails-later-tries", "2")
    page.click("#start-submit")
    page.wait_for_url(base + "/jobs/*")
    job = Job.objects.get()
    assert job.env == "fails-later", "its environment: the recipe's name unless given"
    page.wait_for_selector("#output-lines .line:has-text('waiting')")

    # While it runs, the jobs list says which GPU it holds, and offers Stop, not Restart.
    page.goto(base + "/jobs")
    page.click("details#start summary")
    held = page.locator(f'#workers tr[data-worker="launch@{settings.YARDSTICK_NODE}"] .worker-held')
    assert held.inner_text() == f"GPU 0: job #{job.pk}"
    row = page.locator(f'tr[data-job="{job.pk}"]')
    assert row.locator(".job-stop-form button").is_visible() and row.locator(".job-restart-form").count() == 0

    record_events(page)
    page.goto(f"{base}/jobs/{job.pk}")
    wait_subscribed(page)
    loaded_at = page.evaluate("window.__yardstickLoadedAt")
    controls = page.locator(f'[data-job-controls="{job.pk}"]')
    assert controls.locator(".job-restart-form").count() == 0
    touch(settings, job.pk, "fail")
    page.wait_for_selector("#job-status .status[data-status='failed']", timeout=30_000)
    # Offered live, beside why it cannot resume, in place of Resume.
    page.wait_for_selector(f'[data-job-controls="{job.pk}"] .job-restart-form button')
    why = page.inner_text(f'[data-job-controls="{job.pk}"] .job-restart-why')
    assert why == (f"cannot be resumed: job {job.pk}'s recipe fails-later gives no resume arguments: Restart starts it "
                   "again from the beginning")
    assert not controls.locator(".job-resume-form button").is_visible()
    assert page.evaluate("window.__yardstickLoadedAt") == loaded_at
    page.wait_for_selector("#launch-exit")
    assert page.inner_text("#launch-exit") == "1"
    shot(page, output_dir, request, "job-page")

    controls.locator(".job-restart-form button").click()
    # (Its "queued" message goes once the worker has it running: job.js drops a message its status outlived.)
    page.wait_for_url(lambda url: url.rsplit("/", 1)[-1].isdigit() and url.rsplit("/", 1)[-1] != str(job.pk))
    again = Job.objects.exclude(pk=job.pk).get()
    assert page.url == f"{base}/jobs/{again.pk}"
    assert (again.name, again.team, again.launch.values) == ("flaky", "research", {"tries": 2})
    page.wait_for_selector("#output-lines .line:has-text('waiting')", timeout=30_000)

    # In the jobs list: Restart appears live in the row of a job that ends without a checkpoint, and is in the
    # row of the one that already had.
    page.goto(base + "/jobs")
    wait_subscribed(page)
    assert page.locator(f'tr[data-job="{again.pk}"] .job-restart-form').count() == 0
    touch(settings, again.pk, "fail")
    page.wait_for_selector(f'tr[data-job="{again.pk}"] .job-restart-form button', timeout=30_000)
    assert page.locator(f'tr[data-job="{again.pk}"] .job-status .status').get_attribute("data-status") == "failed"
    row = page.locator(f'tr[data-job="{job.pk}"]')
    assert "gives no resume arguments" in row.locator(".job-restart-why").inner_text()
    shot(page, output_dir, request, "list")
    row.locator(".job-restart-form button").click()
    page.wait_for_url(lambda url: url.rsplit("/", 1)[-1].isdigit())
    third = Job.objects.exclude(pk__in=[job.pk, again.pk]).get()
    assert page.url == f"{base}/jobs/{third.pk}" and third.launch.recipe_name == "fails-later"
    wait_for(lambda: Launch.objects.filter(pk=third.pk, pid__isnull=False).exists(), what="the third job to start")
    touch(settings, third.pk, "fail")
    wait_for(lambda: Job.objects.filter(pk=third.pk, status="failed").exists(), what="the third job to fail")

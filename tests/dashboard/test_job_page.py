"""The job page: every chart, samples by step, config, history; live topics."""

import json
from datetime import datetime, timedelta, timezone

from tests.dashboard import builders as b

UTC = timezone.utc


def test_it_shows_reward_band_evals_throughput_timing_losses_and_cost(viewer_client):
    job = b.job(name="grpo-a", steps_total=100)
    b.steps(job, 12, eval_every=5)
    resp = viewer_client.get(f"/jobs/{job.pk}")
    assert resp.status_code == 200
    figs = json.loads(resp.context["figures_json"])
    assert set(figs) == {"reward", "throughput", "timing", "losses", "cost"}
    lower, upper, mean, evals = figs["reward"]["data"]
    assert mean["x"] == list(range(13)) and mean["y"][12] == 0.3 + 0.002 * 12
    assert abs(upper["y"][1] - lower["y"][1] - 0.2) < 1e-9, "the band is mean ± std"
    assert evals["x"] == [0, 5, 10] and evals["yaxis"] == "y2"
    assert [t["name"] for t in figs["timing"]["data"]] == ["generate", "score", "train", "eval", "checkpoint",
                                                           "other / not split by phase"]
    assert abs(figs["timing"]["data"][-1]["y"][1] - (0.75 - 0.5 - 0.01 - 0.2)) < 1e-9, "the step's rest"
    assert figs["throughput"]["data"][1]["y"][1] == 480 / 0.75, "tokens per second of wall time"
    assert len(figs["losses"]["data"]) == 4
    assert resp.context["topics"] == f"job.{job.pk},jobs,costs"
    html = resp.content.decode()
    assert "<code>12+30=</code>" in html, "the newest step's rollouts"
    assert "prompts_per_step" in html, "the config"


def test_the_step_picker_shows_the_rollouts_of_that_step(viewer_client):
    job = b.job()
    b.steps(job, 5)
    resp = viewer_client.get(f"/jobs/{job.pk}?step=3")
    assert resp.context["sample_step"] == 3 and [s.step for s in resp.context["samples"]] == [3]
    assert viewer_client.get(f"/jobs/{job.pk}?step=x").status_code == 400


def test_paused_means_no_topics(viewer_client):
    job = b.job()
    assert viewer_client.get(f"/jobs/{job.pk}?live=0").context["topics"] == ""


def test_the_cost_chart_and_cards_come_from_the_cost_engine(viewer_client):
    now = datetime.now(UTC)
    start = b.floor_minute(now) - timedelta(minutes=30)
    b.prices(per_hour="3.60", per_kwh="0", pue="1")
    dev = b.device(b.node("gpu-a"), 0)
    b.minutes(dev, start, 20)
    job = b.job(steps_total=100)
    b.stint(job, dev, start, start + timedelta(minutes=20))
    b.steps(job, 10, start=start, every_s=100, eval_every=5)
    b.attribute(now)
    resp = viewer_client.get(f"/jobs/{job.pk}")
    intel = resp.context["intel"]
    assert intel["cost_usd"] == "1.20", "20 device-minutes at $3.60/h"
    assert intel["gain_points"] == 5.0 and intel["state"] == "ok"
    cost = json.loads(resp.context["figures_json"])["cost"]
    assert cost["data"][0]["x"] == [0, 5, 10]
    assert cost["data"][0]["y"][-1] > 0


def test_a_run_that_reports_only_its_step_time_fills_the_timing_chart_with_it():
    from dashboard import figures

    figs = figures.job_figures([1, 2], {"timing/step_s": [2.5, 3.0]}, [], None)
    other = figs["timing"]["data"][-1]
    assert other["name"] == "other / not split by phase" and other["y"] == [2.5, 3.0]
    assert "empty" not in figs["timing"], "a TRL run's step_time is a chart, not 'No training step yet'"


def test_an_unknown_job_is_404(viewer_client):
    assert viewer_client.get("/jobs/999999").status_code == 404


def test_beside_the_cost_it_says_how_much_of_it_was_building_the_base_policy(viewer_client):
    from trainer.models import Job, Step

    # $0.10 a device-minute for 3 minutes; the build ran from 10 s into the first minute for 70 s,
    # held all along: 70 s of $0.10 a minute is $0.1167, not the two whole minutes it touched.
    b.prices(per_hour="6.00", per_kwh="0", pue="1")
    gpu = b.device(b.node("gpu-a"), 0)
    start = b.floor_minute(datetime.now(UTC)) - timedelta(minutes=5)
    b.minutes(gpu, start, 3)
    job = b.job(name="first on arithmetic", status="completed")
    b.stint(job, gpu, start, start + timedelta(minutes=3))
    began = (start + timedelta(seconds=10)).timestamp()
    Step.objects.create(job=job, step=0, at=start + timedelta(seconds=90), eval_pass1=30.0,
                        metrics={"eval/pass1": 30.0, "base/build_started_at": began, "base/build_s": 70.0})
    b.attribute(now=start + timedelta(minutes=4))

    html = viewer_client.get(f"/jobs/{job.pk}").content.decode()
    assert ("includes $0.12 / 70 s building the base policy (shared by later jobs on arithmetic)"
            in " ".join(html.split()))

    # While it builds, the page says the cost includes the build, before any figure of it exists.
    Job.objects.filter(pk=job.pk).update(status="running", phase="building the base policy for arithmetic")
    Step.objects.filter(job=job).delete()
    html = viewer_client.get(f"/jobs/{job.pk}").content.decode()
    assert "includes the base-policy build now running (shared by later jobs on arithmetic)" in html


def test_a_chart_with_nothing_to_draw_yet_carries_what_to_say_instead_of_axes(viewer_client):
    job = b.job(name="fresh")
    figs = json.loads(viewer_client.get(f"/jobs/{job.pk}").context["figures_json"])
    assert {k: f.get("empty") for k, f in figs.items()} == {
        "reward": "No steps yet", "throughput": "No steps yet", "timing": "No steps yet", "losses": "No steps yet",
        "cost": "No eval with a cost yet"}
    b.steps(job, 0)  # the baseline alone: an eval, no training figures
    figs = json.loads(viewer_client.get(f"/jobs/{job.pk}").context["figures_json"])
    assert {k: f.get("empty") for k, f in figs.items()} == {
        "reward": None, "throughput": "No training step yet", "timing": "No training step yet",
        "losses": "No training step yet", "cost": None}, "the baseline's eval is drawn, at $0 so far"
    trained = b.job(name="trained")
    b.steps(trained, 2)
    figs = json.loads(viewer_client.get(f"/jobs/{trained.pk}").context["figures_json"])
    assert [k for k, f in figs.items() if "empty" in f] == []


def test_a_failed_jobs_traceback_keeps_its_lines_with_the_exception_standing_out(viewer_client):
    import html as htmllib
    import re

    from trainer.models import Job

    error = ("exited with status 1: ValueError: the reward model is gone\nTraceback (most recent call last):\n"
             '  File "train.py", line 3, in <module>\n    raise ValueError("the reward model is gone")\n'
             "ValueError: the reward model is gone")
    job = b.job(name="boom", status="failed")
    Job.objects.filter(pk=job.pk).update(error=error)

    page = viewer_client.get(f"/jobs/{job.pk}").content.decode()

    summary = re.search(r'<div class="job-error"[^>]*>\s*<p class="error">(.*?)</p>', page, re.S)
    quoted = re.search(r'<pre class="error-text">(.*?)</pre>', page, re.S)
    assert htmllib.unescape(summary.group(1)) == "exited with status 1: ValueError: the reward model is gone"
    assert htmllib.unescape(re.sub(r"<[^>]+>", "", quoted.group(1))).splitlines() == error.splitlines()[1:], (
        "a line of the traceback a line")
    assert re.search(r'<strong class="error-last">ValueError: the reward model is gone</strong></pre>', quoted.group(0))


def test_the_base_build_in_the_cost_is_said_running_only_while_the_job_builds_it(viewer_client):
    from trainer.models import Job

    job = b.job(name="first on arithmetic", status="running")
    Job.objects.filter(pk=job.pk).update(phase="building the base policy for arithmetic: step 120 of at most 1500")

    page = viewer_client.get(f"/jobs/{job.pk}").content.decode()
    assert ('<div class="hint" id="job-base-build" data-while-phase="building the base policy">includes the base-policy '
            "build now running") in page

    job.refresh_from_db()
    job.finish("stopped", "stopped while building the base policy (no checkpoint yet)")
    part = viewer_client.get(f"/jobs/{job.pk}/part/base_build")
    assert part.status_code == 200
    assert part.content.decode().strip().endswith('<div class="hint" id="job-base-build"></div>')


def test_the_held_seconds_sentence_shows_only_beside_a_split_it_explains(viewer_client):
    job = b.job(name="no steps yet", status="running")

    page = viewer_client.get(f"/jobs/{job.pk}").content.decode()

    assert '<p class="hint" id="pp-held-hint" hidden>Each phase\'s share of the <span id="pp-held"' in page

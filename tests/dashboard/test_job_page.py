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
    assert [t["name"] for t in figs["timing"]["data"]] == ["generate", "score", "train", "eval", "checkpoint"]
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


def test_an_unknown_job_is_404(viewer_client):
    assert viewer_client.get("/jobs/999999").status_code == 404

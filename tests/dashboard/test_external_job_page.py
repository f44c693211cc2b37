"""An external run's job page and its row on Jobs: badge, params, charts by metric prefix, samples and
figures from its artifacts, and the operator's score-key form."""

import io
import json
import math

from tests.files import png_bytes


def _run(framework_params=(("num_generations", "8"),), experiment="grpo-trl"):
    from tracking import store

    exp = store.create_experiment(experiment)
    run = store.create_run(exp.pk, run_name="qwen-grpo", tags=[{"key": "yardstick.team", "value": "research"}])
    store.log_batch(run.run_id, params=[{"key": k, "value": v} for k, v in framework_params])
    run.refresh_from_db()
    return run


def _log(run, step, **values):
    from tracking import store

    store.log_batch(run.run_id, metrics=[{"key": k.replace("__", "/"), "value": v, "timestamp": 1_700_000_000_000 + step,
                                          "step": step} for k, v in values.items()])


def test_it_shows_the_runs_params_and_a_live_chart_per_metric_prefix_beside_the_standard_ones(viewer_client):
    run = _run()
    for s in (1, 2, 3):
        _log(run, s, reward=0.1 * s, kl=0.01, train__reward=0.2 * s, train__kl_penalty=0.5, perf__throughput=900.0 + s)
    resp = viewer_client.get(f"/jobs/{run.job_id}")
    assert resp.status_code == 200
    figs = json.loads(resp.context["figures_json"])
    assert [f["key"] for f in resp.context["logged_figs"]] == ["logged:perf", "logged:train", "logged:other"]
    train = figs["logged:train"]
    assert [t["name"] for t in train["data"]] == ["kl_penalty", "reward"], "named without their prefix"
    assert train["data"][1]["x"] == [1, 2, 3] and train["data"][1]["y"] == [0.2, 0.4, 0.6000000000000001]
    assert train["live"]["traces"][1] == {"trace": 1, "y": {"key": "train/reward"}, "skip_null": True}
    assert [t["name"] for t in figs["logged:other"]["data"]] == ["kl", "reward"]
    assert "train/reward_mean" not in json.dumps(figs["logged:train"]), "derived keys stay on the standard charts"
    assert figs["reward"]["data"][2]["y"] == [0.2, 0.4, 0.6000000000000001], "NeMo RL's train/reward charts as reward"
    html = resp.content.decode()
    assert "external · trl</span>" in html
    assert '<th scope="row">num_generations</th><td><code>8</code></td>' in html, "its params, in place of a config"
    assert "<h2>Config</h2>" not in html and run.run_id in html
    assert "train/reward_mean" in json.loads(resp.context["derived_keys_json"])


def test_the_jobs_list_marks_an_external_run_with_its_framework_beside_embedded_jobs(viewer_client):
    from tests.dashboard import builders as b

    embedded = b.job(name="our-grpo")
    run = _run(framework_params=(("actor_rollout_ref.rollout.n", "5"),))
    _log(run, 7, critic__score__mean=0.5)
    html = viewer_client.get("/jobs").content.decode()
    row = html[html.index(f'<tr data-job="{run.job_id}">'):]
    row = row[:row.index("</tr>")]
    assert "external · verl</span>" in row and '<span class="progress-text">step 7</span>' in row
    mine = html[html.index(f'<tr data-job="{embedded.pk}">'):]
    assert "external" not in mine[:mine.index("</tr>")]


def test_generations_become_rollout_samples_and_images_figures_on_the_job_page(viewer_client, settings, tmp_path):
    from tracking import artifacts

    settings.DATA_DIR = tmp_path
    run = _run()
    rows = [{"input": "What is 6*7?", "output": "42", "score": 1.0}, {"input": "2+2?", "output": "5", "score": 0}]
    artifacts.save(run, "val_step3.json", io.BytesIO(json.dumps(rows).encode()))
    artifacts.save(run, "plots/reward curve.png", io.BytesIO(png_bytes()))
    resp = viewer_client.get(f"/jobs/{run.job_id}")
    assert resp.context["sample_step"] == 3
    assert [(s.prompt, s.completion, s.reward) for s in resp.context["samples"]] == [("What is 6*7?", "42", 1.0),
                                                                                      ("2+2?", "5", 0.0)]
    assert math.isnan(resp.context["samples"][0].advantage), "not reported by the framework"
    html = resp.content.decode()
    assert '<td class="num">—</td>' in html, "an advantage not reported reads as a dash, not nan"
    url = f"/api/2.0/mlflow-artifacts/artifacts/{run.experiment_id}/{run.run_id}/artifacts/plots/reward%20curve.png"
    assert f'<img src="{url}" alt="plots/reward curve.png"' in html
    assert b"".join(viewer_client.get(url).streaming_content) == png_bytes()
    assert 'href="' + url.replace("plots/reward%20curve.png", "val_step3.json") + '"' in html, "other files are links"


def test_an_operator_sets_the_score_key_and_the_run_is_rescored_by_it(operator_client):
    from trainer.models import Job

    run = _run()
    _log(run, 1, validation__accuracy=0.25, eval__pass_rate=0.5)
    _log(run, 2, validation__accuracy=0.5, eval__pass_rate=0.75)
    page = operator_client.get(f"/jobs/{run.job_id}").content.decode()
    assert "Scored by <code>validation/accuracy</code>: the default: the first logged of validation/accuracy" in page
    assert Job.objects.get(pk=run.job_id).baseline_pass1 == 25.0

    resp = operator_client.post(f"/jobs/{run.job_id}/score-key", {"score_key": "eval/pass_rate"}, follow=True)
    html = resp.content.decode()
    assert "Experiment &#x27;grpo-trl&#x27; now scores its runs by &#x27;eval/pass_rate&#x27;." in html
    assert "Scored by <code>eval/pass_rate</code>: set for experiment &#x27;grpo-trl&#x27;." in html
    job = Job.objects.get(pk=run.job_id)
    assert (job.baseline_pass1, job.latest_pass1) == (0.5, 0.75), "rescored: a pass rate is taken as logged"

    bad = operator_client.post(f"/jobs/{run.job_id}/score-key", {"score_key": "../etc"}, follow=True)
    assert "Score not changed: Invalid score key name: &#x27;../etc&#x27;" in bad.content.decode()
    back = operator_client.post(f"/jobs/{run.job_id}/score-key", {"score_key": ""}, follow=True)
    assert "scores its runs by the default keys again" in back.content.decode()
    assert Job.objects.get(pk=run.job_id).baseline_pass1 == 25.0


def test_a_viewer_cannot_set_the_score_key(viewer_client):
    run = _run()
    assert viewer_client.post(f"/jobs/{run.job_id}/score-key", {"score_key": "reward"}).status_code == 403
    assert 'id="score-form"' not in viewer_client.get(f"/jobs/{run.job_id}").content.decode()


def test_a_long_runs_metric_charts_hold_at_most_the_point_limit_and_its_newest_value(db):
    from dashboard import readings
    from tracking.models import Metric

    run = _run()
    Metric.objects.bulk_create([Metric(run=run, key="train/loss", value=float(s), timestamp=s, step=s)
                                for s in range(1, 5001)])
    steps, values = readings.run_metric_series(run, max_points=100)["train/loss"]
    assert len(steps) <= 101 and steps[0] == 1 and steps[-1] == 5000 and values[-1] == 5000.0


def test_points_at_steps_no_job_step_can_hold_are_kept_drawn_and_named_on_the_page(viewer_client):
    run = _run()
    _log(run, -1, reward=0.05)  # a baseline before the first step, as people log it
    _log(run, 2**40, reward=0.9, kl=0.2)  # a timestamp used as the step
    _log(run, 3, reward=0.3)
    resp = viewer_client.get(f"/jobs/{run.job_id}")
    assert resp.status_code == 200
    assert [s.step for s in run.job.steps.all()] == [3], "only the step a job can hold"
    html = resp.content.decode()
    note = html.split('id="logged-unchartable">', 1)[1].split("</p>", 1)[0]
    assert "outside 0 to 2,147,483,647" in note
    assert "<code>kl</code> (1 point)" in note and "<code>reward</code> (2 points)" in note
    figs = json.loads(resp.context["figures_json"])
    drawn = [x for trace in figs["logged:other"]["data"] if trace["name"] == "reward" for x in trace["x"]]
    assert sorted(drawn) == [-1, 3, 2**40]


def test_a_run_with_every_step_chartable_has_no_such_note(viewer_client):
    run = _run()
    _log(run, 1, reward=0.1)
    assert 'id="logged-unchartable"' not in viewer_client.get(f"/jobs/{run.job_id}").content.decode()

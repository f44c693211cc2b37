"""Stop-loss: a job whose last dollars bought too few points, or whose training collapsed, is stopped with the
reason and what stopping saved (a projection from its own curve); bad rules are refused naming the field.
Costs come from real allocations (the attribution of rollup minutes), scores from the job's stored evals."""

import socket
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from alerts import stoploss as evaluate
from alerts.tasks import evaluate as evaluate_task
from costs.attribution import attribute
from tests.costs.cost_builders import Fleet, set_prices, utc
from trainer import stoploss
from trainer.models import Job, Step
from yardstick.inputs import InputError

T0 = utc(2025, 5, 1, 12, 0)


@pytest.fixture
def fleet(db):
    return Fleet()


def evals(job, points):
    """Eval rows: [(step, seconds after T0, pass@1)]."""
    for step, after_s, pass1 in points:
        Step.objects.create(job=job, step=step, at=T0 + timedelta(seconds=after_s), eval_pass1=pass1,
                            metrics={"eval/pass1": pass1})
    Job.objects.filter(pk=job.pk).update(steps_done=max(s for s, _, _ in points))


def a_job_on_a_dollar_a_minute(fleet, name="flat", stop_loss=None):
    """A running job of 100 steps holding a GPU that costs $1 a minute, for the 10 minutes from T0."""
    set_prices(("*", "60.00", "0", "1", T0.date()))
    gpu = fleet.device(fleet.node(f"n-{name}"))
    fleet.minutes(gpu, T0, 10, power_w=100)
    job = fleet.job(name, "red")
    fleet.stint(job, gpu, T0)
    if stop_loss is not None:
        job.set_stop_loss(stop_loss)
    return job


# -- the rule as people write it ----------------------------------------------------------------------


def test_a_rule_is_stored_normalised_and_every_bad_field_is_named_with_what_is_accepted():
    assert stoploss.parse({"usd": "0.50", "points": 1}) == {"usd": "0.50", "points": 1.0}
    assert stoploss.parse({"usd": 5, "points": "2", "kl_max": "0.4"}) == {"usd": "5", "points": 2.0, "kl_max": 0.4,
                                                                         "steps": 5}
    assert stoploss.parse(None) == {} and stoploss.parse({}) == {}
    refused = {
        "usd": ({"usd": "-1", "points": 1}, "stop_loss.usd must be dollars > 0"),
        "usd precision": ({"usd": "0.0000001", "points": 1}, "at most 6 decimal places"),
        "points missing": ({"usd": "1"}, "stop_loss.points is missing"),
        "points": ({"usd": "1", "points": "many"}, "stop_loss.points must be a number of points >= 0, got 'many'"),
        "steps alone": ({"steps": 3}, "give one of them with it"),
        "steps": ({"kl_max": 1, "steps": 0}, "stop_loss.steps must be a whole number of steps from 1"),
        "entropy": ({"entropy_min": 0}, "stop_loss.entropy_min must be an entropy > 0"),
        "unknown": ({"dollars": 1}, "unknown stop-loss field 'dollars'; accepted: usd, points"),
        "not an object": ([1], "stop_loss must be an object with usd and points"),
    }
    for case, (raw, words) in refused.items():
        with pytest.raises(InputError) as err:
            stoploss.parse(raw)
        assert words in err.value.message, (case, err.value.message)
        assert err.value.field.startswith("stop_loss"), case
    assert stoploss.describe(stoploss.parse({"usd": "2", "points": 1, "reward_drop": 0.3, "steps": 4})) == (
        "stop when the last $2 bought fewer than 1 point, or when reward mean 0.3 below its best for 4 steps")


# -- the marginal rule -------------------------------------------------------------------------------


def test_the_last_dollars_buying_too_few_points_stop_the_job_with_the_reason_and_what_it_saved(fleet):
    job = a_job_on_a_dollar_a_minute(fleet, stop_loss={"usd": "5", "points": 2})
    # Charged by each eval: $0.50, $3.50, $6.50, $9.50 (half a minute into minutes 0, 3, 6 and 9).
    evals(job, [(0, 30, 10.0), (10, 210, 20.0), (20, 390, 20.5), (30, 570, 20.6)])
    attribute(now=T0 + timedelta(minutes=10))

    assert evaluate.check(now=T0 + timedelta(minutes=10)) == [job.pk]

    job.refresh_from_db()
    assert job.status == "stopping" and job.stop_requested
    out = job.stop_loss_outcome
    # The newest eval with $5 spent before the last one is step 10 ($3.50): steps 10 to 30 cost $6.00 for
    # +0.6 points, under 2.
    assert out["reason"] == "stop-loss: steps 10 to 30 cost $6.00 and bought +0.6 points, fewer than 2 points for $5"
    assert out["window"] == {"from_step": 10, "to_step": 30, "usd": "6.00", "points": pytest.approx(0.6)}
    # $6.00 / 20 steps = $0.30 a step, times the 70 steps of 100 it did not run.
    assert (out["usd_per_step"], out["steps_left"], out["saved_usd"]) == ("0.30", 70, "21.00")
    assert out["projection"] == ("projected from this run's own curve: the 70 steps left of 100 at $0.30 per step, "
                                 "its cost per step from step 10 to 30")
    assert job.status_changes.last().reason == out["reason"]
    assert evaluate.check(now=T0 + timedelta(minutes=10)) == [], "it fires once"


def test_a_step_cheaper_than_a_hundredth_of_a_cent_is_priced_per_thousand_steps(fleet):
    job = a_job_on_a_dollar_a_minute(fleet, stop_loss={"usd": "0.0002", "points": 2})
    set_prices(("*", "0.0036", "0", "1", T0.date()))  # $0.00006 a minute
    evals(job, [(0, 30, 10.0), (10, 210, 20.0), (20, 390, 20.5), (30, 570, 20.6)])
    attribute(now=T0 + timedelta(minutes=10))

    assert evaluate.check(now=T0 + timedelta(minutes=10)) == [job.pk]
    out = Job.objects.get(pk=job.pk).stop_loss_outcome
    # Steps 10 to 30: $0.00036 for 20 steps, $0.000018 a step, $0.018 a thousand (shown to the cent, as every
    # dollar figure of a cent or more); 70 steps left: $0.00126.
    assert out["projection"].startswith("projected from this run's own curve: the 70 steps left of 100 at "
                                        "$0.02 per 1,000 steps")
    assert out["saved_usd"] == "0.00126"


def test_enough_points_or_a_window_not_yet_spent_leave_the_job_running(fleet):
    enough = a_job_on_a_dollar_a_minute(fleet, "enough", stop_loss={"usd": "5", "points": "0.5"})
    early = a_job_on_a_dollar_a_minute(fleet, "early", stop_loss={"usd": "9.5", "points": 2})
    for job in (enough, early):
        evals(job, [(0, 30, 10.0), (10, 210, 20.0), (20, 390, 20.5), (30, 570, 20.6)])
    attribute(now=T0 + timedelta(minutes=10))

    # +0.6 for the last $6.00 is at least 0.5; and no eval lies $9.50 before the last ($9.00 is all there is).
    assert evaluate.check(now=T0 + timedelta(minutes=10)) == []
    assert set(Job.objects.filter(pk__in=[enough.pk, early.pk]).values_list("status", flat=True)) == {"running"}


def test_a_resumed_job_spends_the_window_again_before_the_rule_judges_it(fleet):
    job = a_job_on_a_dollar_a_minute(fleet, stop_loss={"usd": "5", "points": 2})
    evals(job, [(0, 30, 10.0), (10, 210, 20.0), (20, 390, 20.5), (30, 570, 20.6)])
    attribute(now=T0 + timedelta(minutes=10))
    # Resumed from its checkpoint at step 20: only evals from step 20 on count, $3.00 apart, under $5.
    Job.objects.filter(pk=job.pk).update(stop_loss={**job.stop_loss, "from_step": 20})
    assert evaluate.check(now=T0 + timedelta(minutes=10)) == []


# -- collapse ----------------------------------------------------------------------------------------


def test_a_reward_that_collapsed_for_its_steps_stops_the_job(fleet):
    job = a_job_on_a_dollar_a_minute(fleet, "collapsing", stop_loss={"reward_drop": 0.2, "steps": 3})
    for i, reward in enumerate([0.3, 0.6, 0.5, 0.3, 0.35, 0.3], start=1):
        Step.objects.create(job=job, step=i, at=T0 + timedelta(seconds=60 * i), reward_mean=reward,
                            metrics={"train/reward_mean": reward})
    Job.objects.filter(pk=job.pk).update(steps_done=6)
    attribute(now=T0 + timedelta(minutes=10))

    assert evaluate.check(now=T0 + timedelta(minutes=10)) == [job.pk]
    out = Job.objects.get(pk=job.pk).stop_loss_outcome
    assert out["rule"] == "reward_drop"
    assert out["reason"].startswith(f"stop-loss: job {job.pk} 'collapsing': reward mean 0.3 is 0.3 below its best 0.6")
    # Its last 3 steps ran from minute 3 to minute 6: $3.00 for 3 steps, $1.00 a step, 94 steps left.
    assert (out["usd_per_step"], out["steps_left"], out["saved_usd"]) == ("1.00", 94, "94.00")


# -- the API ------------------------------------------------------------------------------------------


def test_the_api_sets_and_removes_a_rule_refuses_a_bad_one_unchanged_and_only_for_operators(
        fleet, operator, viewer, api_token):
    job = a_job_on_a_dollar_a_minute(fleet, stop_loss={"usd": "1", "points": 1})
    op = Client(HTTP_AUTHORIZATION=f"Bearer {api_token(operator)}")
    url = f"/api/jobs/{job.pk}/stop-loss"

    resp = op.put(url, {"usd": "2.5", "points": 3, "kl_max": 0.5}, content_type="application/json")
    assert resp.status_code == 200
    assert resp.json()["stop_loss"] == {"usd": "2.5", "points": 3.0, "kl_max": 0.5, "steps": 5, "from_step": 0}
    assert resp.json()["stop_loss_text"] == ("stop when the last $2.5 bought fewer than 3 points, or when KL above "
                                             "0.5 for 5 steps")

    bad = op.put(url, {"usd": "2.5"}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["field"] == "stop_loss.points"
    assert Job.objects.get(pk=job.pk).stop_loss["usd"] == "2.5", "a refused rule changes nothing"

    viewer_client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token(viewer)}")
    assert viewer_client.put(url, {}, content_type="application/json").status_code == 403
    assert viewer_client.get(f"/api/jobs/{job.pk}").json()["stop_loss"]["points"] == 3.0

    assert op.delete(url).json()["stop_loss"] == {}
    assert op.put("/api/jobs/999999/stop-loss", {}, content_type="application/json").status_code == 404

    created = op.post("/api/jobs", {"name": "guarded", "team": "red", "env": "arithmetic",
                                    "stop_loss": {"usd": "0.5", "points": "1"}}, content_type="application/json")
    assert created.status_code == 201 and created.json()["stop_loss"] == {"usd": "0.5", "points": 1.0, "from_step": 0}
    refused = op.post("/api/jobs", {"name": "bad", "team": "red", "env": "arithmetic", "stop_loss": {"usd": "x", "points": 1}},
                      content_type="application/json")
    assert refused.status_code == 400 and refused.json()["field"] == "stop_loss.usd"
    assert not Job.objects.filter(name="bad").exists()


# -- a real job ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_models_dir(tmp_path_factory):
    """A tiny base policy (as the trainer's tests build it), so a real job takes seconds."""
    from trainer.rl.model import GPTConfig
    from trainer.rl.pretrain import pretrain

    path = tmp_path_factory.mktemp("models")
    pretrain("arithmetic", path, "cpu", model_config=GPTConfig(n_layer=1, n_head=2, n_embd=32),
             max_steps=30, batch_size=32, target_pass1=101.0, probe_every=1000, probe_size=4)
    return path


def test_a_real_tiny_job_whose_score_flattened_is_stopped_at_a_checkpoint_by_its_stop_loss(fleet, settings,
                                                                                         tiny_models_dir, tmp_path):
    from tests.trainer.helpers import TINY
    from trainer import runner
    from trainer.models import Stint

    (tmp_path / "models").symlink_to(tiny_models_dir, target_is_directory=True)
    settings.DATA_DIR = tmp_path
    set_prices(("*", "60.00", "0", "1", T0.date()))  # $1 a device-minute
    host = fleet.device(fleet.node(socket.gethostname(), team="infra"), model="Test CPU", source="host",
                        power_estimated=True)
    # A learning rate near zero: the policy, so its greedy eval score, stays where it is.
    job = Job.start(name="flat", team="research", env="arithmetic", device="cpu", enqueue=False,
                    config={**TINY, "steps": 40, "eval_every": 1, "lr": 1e-12},
                    stop_loss={"usd": "1.5", "points": 1})
    seen = {}

    def after_step(job, step, metrics):
        if step != 2:
            return
        # The minutes behind the run, as the collector would have measured them: it started three minutes ago
        # and evaluated a minute apart (the baseline at step 0, then steps 1 and 2).
        start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
        Stint.objects.filter(job=job).update(started_at=start)
        for s in (0, 1, 2):
            Step.objects.filter(job=job, step=s).update(at=start + timedelta(minutes=s, seconds=30))
        fleet.minutes(host, start, 3, power_w=150)
        attribute(now=start + timedelta(minutes=3))
        seen["summary"] = evaluate_task()  # the periodic task body: alert rules, then stop-losses

    job = runner.run(job.pk, progress=after_step)

    assert seen["summary"]["stop_losses"] == [job.pk]
    scores = dict(Step.objects.filter(job=job, eval_pass1__isnull=False).values_list("step", "eval_pass1"))
    assert scores[2] - scores[0] < 1, scores
    assert job.status == "stopped" and job.steps_done == 2 and job.checkpoint_step == 2
    final = job.status_changes.last()
    # Charged $0.50 by the baseline's eval and $2.50 by step 2's: $2.00 for steps 0 to 2.
    assert final.reason.startswith("stop-loss: steps 0 to 2 cost $2.00 and bought +0.0 points, fewer than 1 point "
                                   "for $1.5; stopped at step 2"), final.reason
    out = job.stop_loss_outcome
    assert (out["usd_per_step"], out["steps_left"], out["saved_usd"]) == ("1.00", 38, "38.00")
    assert Stint.objects.get(job=job).end_reason == "stopped"

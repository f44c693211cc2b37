"""A real tiny campaign on the CPU: base → arithmetic → toolcalc → arithmetic, run by the loop, with retention
evals, its figures checked against the jobs' own costs and the stored evals."""

from decimal import Decimal

import pytest

from campaigns import figures
from campaigns.models import Campaign, Loop, RetentionEval
from costs.intelligence import job_intelligence
from tests.campaigns.charge import charge
from tests.trainer.helpers import TINY
from trainer import runner
from trainer.models import Status


@pytest.fixture
def campaign(data_dir, operator):
    c = Campaign.create(name="agentic", team="research", envs=["arithmetic", "toolcalc"],
                        schedule=["arithmetic", "toolcalc"], run_config={**TINY, "steps": 2}, eval_size=8,
                        device="cpu", created_by=operator)
    c.evaluate_retention()  # what the start task does on the jobs queue
    return c


def evals_after(campaign, job):
    return {e.env: e.pass1 for e in RetentionEval.objects.filter(campaign=campaign, after_job=job)}


def test_the_loop_runs_continues_evaluates_and_adds_up(campaign):
    start = evals_after(campaign, None)
    assert set(start) == {"arithmetic", "toolcalc"}
    assert RetentionEval.objects.get(campaign=campaign, after_job=None, env="toolcalc").policy == \
        "base policy of arithmetic"

    assert campaign.start_loop(by="op")
    runs = []
    for env in ("arithmetic", "toolcalc", "arithmetic"):
        job = campaign.latest_job()
        assert job.env == env and job.status == Status.QUEUED
        assert job.init_from_id == (runs[-1].pk if runs else None)  # each run continues the last
        job = runner.run(job.pk)  # the worker: the run, then (run_ended) retention and the loop's next run
        assert job.status == Status.COMPLETED, job.error
        assert set(evals_after(campaign, job)) == {"arithmetic", "toolcalc"}
        runs.append(job)

    # The loop queued a fourth run (toolcalc); Stop stops it and the loop.
    fourth = campaign.latest_job()
    assert (fourth.env, fourth.init_from_id) == ("toolcalc", runs[-1].pk)
    assert campaign.stop_loop(by="op")
    fourth.refresh_from_db()
    assert campaign.loop == Loop.STOPPED and fourth.status == Status.STOPPED

    charge(runs)
    s = figures.summary(campaign)
    rows = s["runs"]
    assert [r["job_id"] for r in rows] == [j.pk for j in runs] + [fourth.pk]
    # Dollars: each run's is the job's own cost; the campaign's is their sum, to the micro-dollar.
    for r, job in zip(rows, runs):
        assert r["cost_usd"] == job_intelligence(job)["cost_usd"]
        assert Decimal(r["cost_usd"]) > 0
    assert Decimal(s["cost_usd"]) == sum(Decimal(r["cost_usd"]) for r in rows)
    assert rows[-1]["cumulative_usd"] == s["cost_usd"]
    # Gains: from the stored retention evals, before and after each run.
    before = start
    for r, job in zip(rows, runs):
        after = evals_after(campaign, job)
        assert r["own_gain_points"] == pytest.approx(after[job.env] - before[job.env])
        assert r["net_gain_points"] == pytest.approx(sum(after[e] - before[e] for e in after))
        if r["own_gain_points"] and Decimal(r["cost_usd"]) > 0:
            assert r["marginal_ipd"] == pytest.approx(r["own_gain_points"] / float(r["cost_usd"]), rel=1e-5)
            assert r["net_ipd"] == pytest.approx(r["net_gain_points"] / float(r["cost_usd"]), rel=1e-5)
        before = after
    latest = evals_after(campaign, runs[-1])
    assert s["net_gain_points"] == pytest.approx(sum(latest[e] - start[e] for e in start))
    assert rows[-1]["net_gain_points"] is None  # the cancelled run kept no policy to evaluate
    # The projection is a named fit over the arithmetic runs' own eval curves (or says why there is none).
    p = s["projection"]
    assert p["label"] == "projection" and p["fit"] == figures.FIT_NAME and p["env"] == "toolcalc"


def test_retention_evals_use_the_same_prompts_every_time(campaign):
    first = evals_after(campaign, None)
    campaign.evaluate_retention()
    assert evals_after(campaign, None) == first
    assert RetentionEval.objects.filter(campaign=campaign, after_job=None).count() == 2


def test_a_job_continuing_a_run_joins_its_campaign(campaign, make_job):
    from trainer.models import Job

    first = runner.run(make_job(steps=2).pk)
    campaign.add_run(first)
    # retention for `first` was not evaluated by run_ended (it joined after); continuing it joins the campaign
    nxt = Job.start(name="next", team="research", env="toolcalc", config={**TINY, "steps": 2}, init_from=first.pk,
                    enqueue=False)
    assert list(campaign.jobs()) == [first, nxt]
    nxt = runner.run(nxt.pk)
    assert set(evals_after(campaign, nxt)) == {"arithmetic", "toolcalc"}
    assert campaign.loop == Loop.OFF  # a manual campaign: no run was started for it
    assert campaign.jobs().count() == 2


def test_start_goes_on_from_a_completed_run_the_loop_missed(campaign, make_job):
    """The worker died between the run's end and starting the next: the loop says running over an ended run."""
    first = runner.run(make_job(steps=2).pk)
    campaign.add_run(first)
    Campaign.objects.filter(pk=campaign.pk).update(loop=Loop.RUNNING)
    campaign.refresh_from_db()
    assert campaign.can_start_loop
    assert campaign.start_loop(by="op")
    nxt = campaign.latest_job()
    assert (nxt.init_from_id, nxt.env, nxt.status) == (first.pk, "toolcalc", Status.QUEUED)
    assert not campaign.start_loop(by="op") and "already running" in campaign.loop_refusal()


def test_a_run_that_failed_without_a_checkpoint_stops_the_loop_saying_why(campaign, make_job):
    from trainer.models import Job

    failed = make_job()
    Job.objects.filter(pk=failed.pk).update(status=Status.FAILED)
    campaign.add_run(failed)
    assert not campaign.start_loop(by="op")
    assert campaign.loop == Loop.STOPPED
    assert f"could not start run 2: init_from: job {failed.pk} has no checkpoint" in campaign.loop_reason
    assert campaign.jobs().count() == 1

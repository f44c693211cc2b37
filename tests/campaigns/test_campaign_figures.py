"""campaigns.figures on a campaign whose numbers a person can check by hand.

Price: $3.60 per device-hour, $0.10 per kWh, PUE 1.5; the host device draws 100 W. A full minute costs
$0.06 (device) + 6,000 J = 1/600 kWh x $0.10 x 1.5 = $0.00025 (energy) = $0.06025.
Run 1 (arithmetic) holds the device 2 minutes ($0.1205), run 2 (toolcalc) 1 minute ($0.06025), run 3
(arithmetic) 3 minutes ($0.18075): the campaign $0.3615.

Retention (arithmetic, toolcalc): start (10, 20); after run 1 (30, 15); after 2 (25, 40); after 3 (45, 38).
"""

import socket
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from campaigns import figures
from campaigns.models import Campaign, CampaignRun, RetentionEval
from costs.attribution import attribute_window
from trainer.models import Job, Step, Stint

RETENTION = [None, (30, 15), (25, 40), (45, 38)]


@pytest.fixture
def campaign(db, data_dir):
    from collector.models import Device, Node, Rollup1m
    from costs.models import PriceEntry
    from costs.prices import add_price

    now = timezone.now()
    t0 = now.replace(second=0, microsecond=0) - timedelta(hours=1)
    node = Node.objects.create(name=socket.gethostname(), labels={}, first_seen=t0, registered_at=t0)
    device = Device.objects.create(uuid="host-test", node=node, index=0, model="test cpu", source="host",
                                   first_seen=t0, registered_at=t0)
    Rollup1m.objects.bulk_create([Rollup1m(device=device, bucket=t0 + timedelta(minutes=i), samples=60, covered_s=60,
                                           energy_j=6000.0, energy_from="counter", power_mean_w=100.0)
                                  for i in range(8)])
    PriceEntry.objects.all().delete()
    add_price("*", Decimal("3.60"), Decimal("0.10"), Decimal("1.5"), t0.date() - timedelta(days=1))
    c = Campaign.objects.create(name="c", team="research", envs=["arithmetic", "toolcalc"],
                                schedule=["arithmetic", "toolcalc"], eval_size=8)
    for env, score in zip(c.envs, (10, 20)):
        RetentionEval.objects.create(campaign=c, after_job=None, env=env, pass1=score, eval_size=8, policy="base")
    # (env, first minute, minutes held, own evals: (minutes in, pass1))
    runs = [("arithmetic", 0, 2, [(0, 10), (1, 20), (2, 30)]),
            ("toolcalc", 2, 1, [(0, 15), (1, 40)]),
            ("arithmetic", 3, 3, [(0, 30), (1, 34), (2, 38), (3, 42)])]
    for (env, first, held, evals), retention in zip(runs, RETENTION[1:]):
        start = t0 + timedelta(minutes=first)
        job = Job.objects.create(name=f"run on {env}", team="research", env=env, config={"steps": 3},
                                 status="completed", finished_at=start + timedelta(minutes=held), created_at=start)
        Stint.objects.create(job=job, node=node.name, device="cpu", pid=1, started_at=start,
                             ended_at=start + timedelta(minutes=held))
        for i, (minute, pass1) in enumerate(evals):
            Step.objects.create(job=job, step=i, at=start + timedelta(minutes=minute), eval_pass1=pass1,
                                metrics={"eval/pass1": pass1})
        CampaignRun.objects.create(campaign=c, job=job)
        for env_, score in zip(c.envs, retention):
            RetentionEval.objects.create(campaign=c, after_job=job, env=env_, pass1=score, eval_size=8, policy="p")
    attribute_window(t0, t0 + timedelta(minutes=8), now=now)
    return c


def test_dollars_gains_and_ipd_are_the_hand_computed_ones(campaign):
    s = figures.summary(campaign)
    rows = s["runs"]
    assert [r["cost_usd"] for r in rows] == ["0.1205", "0.06025", "0.18075"]
    assert [r["cumulative_usd"] for r in rows] == ["0.1205", "0.18075", "0.3615"]
    assert s["cost_usd"] == "0.3615" and s["cost_display"] == "$0.36"
    # own gain: the run's env; net gain: every env, after minus before
    assert [r["own_gain_points"] for r in rows] == [20, 25, 20]
    assert [r["net_gain_points"] for r in rows] == [15, 20, 18]
    assert s["net_gain_points"] == 53 == (45 - 10) + (38 - 20)
    assert [r["marginal_ipd"] for r in rows] == [pytest.approx(20 / 0.1205), pytest.approx(25 / 0.06025),
                                                 pytest.approx(20 / 0.18075)]
    assert [r["net_ipd_display"] for r in rows] == ["124", "332", "99.6"]  # 15/0.1205, 20/0.06025, 18/0.18075
    assert rows[0]["usd_per_point"] == "0.006025"  # $0.1205 / 20 points
    assert s["net_ipd"] == pytest.approx(53 / 0.3615)
    # cost per point over time: dollars so far / net points so far
    assert [p["usd_per_net_point"] for p in s["cost_per_point_over_time"]] == ["0.008033", "0.005164", "0.006821"]


def test_the_projection_is_a_named_fit_with_its_interval(campaign):
    p = figures.summary(campaign, points=5)["projection"]
    # Arithmetic runs' own curves, gain over each run's baseline against its dollars:
    # run 1: (0.06025, 10), (0.1205, 20); run 3: (0.06025, 4), (0.1205, 8), (0.18075, 12).
    # slope = Σxy / Σx² = 6.3865 / 0.06897119 = 92.597 points per dollar; 5 points = $0.053997.
    assert p["env"] == "arithmetic" and p["n_points"] == 5 and p["label"] == "projection"
    assert p["slope_points_per_usd"] == pytest.approx(92.597, rel=1e-4)
    assert Decimal(p["usd"]) == pytest.approx(Decimal("0.053997"), abs=Decimal("0.000002"))
    assert Decimal(p["usd_low"]) < Decimal(p["usd"]) < Decimal(p["usd_high"])
    assert p["fit"] == figures.FIT_NAME and p["state"] == "ok"


def test_budget_at_a_glance(campaign):
    Campaign.objects.filter(pk=campaign.pk).update(budget_usd=Decimal("1"))
    campaign.refresh_from_db()
    s = figures.summary(campaign)
    assert (s["budget_usd"], s["budget_left_usd"]) == ("1.00", "0.6385")
    assert s["budget_used_fraction"] == pytest.approx(0.3615)


def test_a_runs_dollars_per_own_point_multiply_out_from_its_cost_per_token(campaign):
    first = figures.summary(campaign)["runs"][0]
    Step.objects.filter(job_id=first["job_id"], step=1).update(
        gen_tokens=1_000_000, metrics={"eval/pass1": 20, "timing/generate_s": 30.0, "timing/step_s": 40.0})
    run = figures.summary(campaign)["runs"][0]
    # $0.1205 for 1M rollout tokens; 1M tokens / 20 own points = 0.05; 0.1205 x 0.05 = $0.006025 per own point.
    assert run["usd_per_million_tokens"] == "0.1205" and run["million_tokens_per_point"] == pytest.approx(0.05)
    assert Decimal(run["usd_per_million_tokens"]) * Decimal("0.05") == Decimal(run["usd_per_point"])
    assert run["generation_share"] == pytest.approx(30 / 120), "30 s of generation in the 2 minutes it held"
    assert figures.summary(campaign)["runs"][1]["generation_share"] is None, "no time per phase logged: no split"

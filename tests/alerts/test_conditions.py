"""Every rule kind fires on real rows of the fleet, the cost ledger and the trainer, once, and resolves when its
condition clears."""

from datetime import timedelta
from decimal import Decimal

from alerts.evaluate import evaluate
from alerts.models import Alert, AlertEvent
from collector.models import LatestSample
from tests.alerts.conftest import T0
from tests.dashboard import builders as b
from trainer.models import Job, Step


def states(rule_):
    return {a.subject: a.state for a in Alert.objects.filter(rule=rule_)}


def test_a_gpu_idle_for_longer_than_its_minutes_fires_once_and_resolves_when_busy(rule):
    idle_rule = rule("gpu_idle", duration=30)
    gpu = b.device(b.node("gpu-a", interval_s=10), 0)
    busy = b.device(b.node("gpu-b", interval_s=10), 0)
    start = T0 - timedelta(minutes=40)
    b.samples(gpu, start, 240, every_s=10, util_pct=0.0)
    b.samples(busy, start, 240, every_s=10, util_pct=0.0)
    # Busy once in the window: not idle for 30 minutes.
    b.samples(busy, T0 - timedelta(minutes=5, seconds=5), 1, util_pct=90.0)
    b.latest(gpu, 0.0, 60.0, ts=T0 - timedelta(seconds=5))
    b.latest(busy, 0.0, 60.0, ts=T0 - timedelta(seconds=5))

    assert evaluate(now=T0 - timedelta(minutes=15))["fired"] == [], "idle for 25 min only"
    first = evaluate(now=T0)
    assert states(idle_rule) == {"device:gpu-a/0": "firing"}
    assert evaluate(now=T0 + timedelta(seconds=1))["fired"] == [], "fires once"

    LatestSample.objects.filter(device=gpu).update(util_pct=80.0, ts=T0 + timedelta(seconds=20))
    assert evaluate(now=T0 + timedelta(seconds=25))["resolved"] == first["fired"]
    alert = Alert.objects.get(rule=idle_rule)
    assert alert.state == "resolved" and alert.resolved_at == T0 + timedelta(seconds=25)
    assert list(alert.events.values_list("kind", flat=True)) == ["fired", "resolved"]


def test_a_node_stale_for_longer_than_its_minutes_fires_and_resolves_when_it_reports(rule):
    stale_rule = rule("node_stale", duration=5, scope="node:gpu-a")
    gpu = b.device(b.node("gpu-a", interval_s=1), 0)
    other = b.device(b.node("gpu-b", interval_s=1), 0)  # stale too, but out of the rule's scope
    b.latest(gpu, 50.0, 300.0, ts=T0 - timedelta(minutes=4))
    b.latest(other, 50.0, 300.0, ts=T0 - timedelta(minutes=20))

    assert evaluate(now=T0)["fired"] == [], "stale for 4 minutes only"
    evaluate(now=T0 + timedelta(minutes=2))
    assert states(stale_rule) == {"node:gpu-a": "firing"}
    assert Alert.objects.get(rule=stale_rule).value > 5

    LatestSample.objects.filter(device=gpu).update(ts=T0 + timedelta(minutes=3))
    evaluate(now=T0 + timedelta(minutes=3, seconds=1))
    assert states(stale_rule) == {"node:gpu-a": "resolved"}


def test_idle_spend_above_its_dollars_per_hour_fires_per_team_and_resolves_when_the_window_is_cheap(rule):
    b.prices(per_hour="6.00", per_kwh="0", pue="1")  # $0.10 a device-minute: $6/h for an idle device
    spend = rule("idle_spend", threshold=5, duration=10)
    gpu = b.device(b.node("gpu-a", team="research"), 0)
    cheap = b.device(b.node("gpu-b", team="ops"), 0)
    b.minutes(gpu, T0 - timedelta(minutes=10), 10)
    b.minutes(cheap, T0 - timedelta(minutes=10), 5)  # half the window: $3/h
    b.attribute(now=T0)

    evaluate(now=T0)
    assert states(spend) == {"team:research": "firing"}
    assert Alert.objects.get(rule=spend).value == 6.0

    evaluate(now=T0 + timedelta(minutes=6))  # the window now holds 4 idle minutes: $2.40/h
    assert states(spend) == {"team:research": "resolved"}


def test_a_job_failed_fires_and_resolves_when_it_is_resumed_and_old_failures_do_not_fire(rule):
    old = b.job(name="old", status="failed")
    Job.objects.filter(pk=old.pk).update(finished_at=T0 - timedelta(days=1))
    failed_rule = rule("job_failed", scope="team:research")
    other_team = b.job(name="theirs", team="ops", status="failed")
    job = b.job(name="mine", status="failed")
    Job.objects.filter(pk=job.pk).update(error="worker lost")

    evaluate(now=T0)
    assert states(failed_rule) == {f"job:{job.pk}": "firing"}
    assert "worker lost" in Alert.objects.get(rule=failed_rule).message
    assert other_team.pk and old.pk

    Job.objects.filter(pk=job.pk).update(status="queued")
    evaluate(now=T0 + timedelta(minutes=1))
    assert states(failed_rule) == {f"job:{job.pk}": "resolved"}


def test_budget_rules_fire_at_80_and_100_percent_and_resolve_when_the_job_completes(rule):
    b.prices(per_hour="6.00", per_kwh="0", pue="1")
    at80, at100 = rule("budget", threshold=80, name="80%"), rule("budget", threshold=100, name="100%")
    gpu = b.device(b.node("gpu-a"), 0)
    job = b.job(name="capped")
    Job.objects.filter(pk=job.pk).update(budget_usd=Decimal("1.00"))
    b.stint(job, gpu, T0 - timedelta(minutes=20))
    b.minutes(gpu, T0 - timedelta(minutes=9), 9)  # $0.90
    b.attribute(now=T0)

    evaluate(now=T0)
    assert states(at80) == {f"job:{job.pk}": "firing"} and states(at100) == {}
    assert abs(Alert.objects.get(rule=at80).value - 90.0) < 1e-6

    b.minutes(gpu, T0, 1)  # $1.00: stopped by its budget between two evaluations
    b.attribute(now=T0 + timedelta(minutes=1))
    Job.objects.filter(pk=job.pk).update(status="budget_exhausted", finished_at=T0 + timedelta(minutes=1))
    evaluate(now=T0 + timedelta(minutes=1))
    assert states(at100) == {f"job:{job.pk}": "firing"}

    Job.objects.filter(pk=job.pk).update(status="completed")
    evaluate(now=T0 + timedelta(minutes=2))
    assert states(at80) == states(at100) == {f"job:{job.pk}": "resolved"}


def _metric(job, values, key):
    for row in Step.objects.filter(job=job, step__gt=0).order_by("step"):
        value = values[row.step - 1]
        row.metrics = {**row.metrics, key: value}
        row.reward_mean = row.metrics["train/reward_mean"]
        row.save()


def test_a_reward_collapse_fires_after_its_steps_below_the_best_and_resolves_when_it_recovers(rule):
    drop = rule("reward_drop", threshold=0.2, duration=3)
    job = b.job(name="collapsing")
    b.steps(job, 6)
    _metric(job, [0.3, 0.6, 0.5, 0.3, 0.35, 0.3], "train/reward_mean")  # best 0.6; last three below 0.4

    evaluate(now=T0)
    assert states(drop) == {f"job:{job.pk}": "firing"}
    assert abs(Alert.objects.get(rule=drop).value - 0.3) < 1e-9

    Step.objects.create(job=job, step=7, metrics={"train/reward_mean": 0.58}, reward_mean=0.58)
    evaluate(now=T0 + timedelta(minutes=1))
    assert states(drop) == {f"job:{job.pk}": "resolved"}


def test_kl_above_its_limit_for_its_steps_fires_and_a_job_that_ends_resolves_it(rule):
    kl = rule("kl_high", threshold=0.05, duration=2)
    job = b.job(name="drifting")
    calm = b.job(name="calm")
    b.steps(job, 4)
    b.steps(calm, 4)
    _metric(job, [0.01, 0.02, 0.06, 0.09], "train/kl")
    _metric(calm, [0.01, 0.06, 0.01, 0.09], "train/kl")  # above once, not for two steps running

    evaluate(now=T0)
    assert states(kl) == {f"job:{job.pk}": "firing"}
    Job.objects.filter(pk=job.pk).update(status="stopped")
    evaluate(now=T0 + timedelta(minutes=1))
    assert states(kl) == {f"job:{job.pk}": "resolved"}


def test_entropy_below_its_floor_for_its_steps_fires_and_resolves_when_it_rises(rule):
    low = rule("entropy_low", threshold=0.5, duration=2, scope="team:research")
    job = b.job(name="sharpening")
    b.steps(job, 3)
    _metric(job, [1.0, 0.4, 0.3], "train/entropy")

    evaluate(now=T0)
    assert states(low) == {f"job:{job.pk}": "firing"}
    Step.objects.create(job=job, step=4, metrics={"train/entropy": 0.9, "train/reward_mean": 0.4})
    evaluate(now=T0 + timedelta(minutes=1))
    assert states(low) == {f"job:{job.pk}": "resolved"}


def test_a_disabled_rule_resolves_what_it_fired_and_a_second_firing_is_a_new_alert(rule):
    failed_rule = rule("job_failed")
    job = b.job(name="flaky", status="failed")
    evaluate(now=T0)
    failed_rule.change({"enabled": False})
    evaluate(now=T0 + timedelta(minutes=1))
    assert states(failed_rule) == {f"job:{job.pk}": "resolved"}
    assert "rule disabled" in AlertEvent.objects.get(kind="resolved").message

    failed_rule.change({"enabled": True})
    evaluate(now=T0 + timedelta(minutes=2))
    assert list(Alert.objects.filter(rule=failed_rule).values_list("state", flat=True)) == ["firing", "resolved"]


def test_a_device_with_a_critical_health_event_is_unhealthy_for_a_day_and_a_mild_one_is_not(rule):
    from collector.models import DeviceEvent

    sick_rule = rule("device_unhealthy", scope="node:gpu-h")
    node = b.node("gpu-h")
    sick, mild = b.device(node, 0), b.device(node, 1)
    DeviceEvent.objects.create(device=sick, ts=T0 - timedelta(hours=2), kind="xid", code=79, detail="XID 79",
                               critical=True)
    DeviceEvent.objects.create(device=mild, ts=T0 - timedelta(hours=1), kind="xid", code=13, detail="XID 13")

    evaluate(now=T0)
    assert states(sick_rule) == {"device:gpu-h/0": "firing"}
    assert "GPU 0 on gpu-h is unhealthy: XID 79" in Alert.objects.get(rule=sick_rule).message

    evaluate(now=T0 + timedelta(hours=23))  # a day after the XID, with nothing since
    assert states(sick_rule) == {"device:gpu-h/0": "resolved"}

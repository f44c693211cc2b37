"""Builders for dashboard tests: a fleet with telemetry, jobs with steps, and charged costs, in the real tables."""

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from django.db import connection

UTC = timezone.utc

STEP_METRICS = {
    "train/reward_mean": 0.4, "train/reward_std": 0.1, "train/loss": 0.05, "train/kl": 0.001,
    "train/entropy": 1.2, "train/clip_ratio": 0.02, "performance/gen_tokens": 480,
    "performance/gen_tokens_per_s": 900.0, "timing/generate_s": 0.5, "timing/score_s": 0.01,
    "timing/train_s": 0.2, "timing/eval_s": 0.0, "timing/checkpoint_s": 0.0, "timing/step_s": 0.75,
}


def node(name, team=None, interval_s=1.0, now=None):
    from collector.models import Node

    now = now or datetime.now(UTC)
    return Node.objects.create(name=name, labels={"team": team} if team else {}, interval_s=interval_s,
                               first_seen=now, registered_at=now)


def device(node_, index, model="NVIDIA H100 80GB HBM3", source="nvml", simulated=False, power_estimated=False,
           uuid=None):
    from collector.models import Device

    now = datetime.now(UTC)
    return Device.objects.create(uuid=uuid or f"GPU-{node_.name}-{index}", node=node_, index=index, model=model,
                                 source=source, simulated=simulated, power_estimated=power_estimated,
                                 mem_total_mib=81559, first_seen=now, registered_at=now)


def latest(device_, util_pct, power_w, ts=None):
    from collector.models import LatestSample

    return LatestSample.objects.update_or_create(device=device_, defaults=dict(
        ts=ts or datetime.now(UTC), util_pct=util_pct, power_w=power_w, temp_c=50.0, mem_used_mib=1000,
        sm_active_pct=util_pct / 2))[0]


def samples(device_, start, count, every_s=1.0, util_pct=50.0, power_w=300.0):
    """Raw samples every `every_s` from `start` (partitions created as needed)."""
    from collector.agent import schema

    with connection.cursor() as cur:
        days = schema.days_between(start.date(), (start + timedelta(seconds=every_s * count)).date())
        schema.ensure_partitions(cur, days)
        cur.execute(
            "INSERT INTO telemetry_sample (device_id, ts, util_pct, power_w, energy_j, temp_c, mem_used_mib, sm_active_pct) "
            "SELECT %s, %s + make_interval(secs => g * %s), %s, %s, g * %s * %s, 55, 2000, %s "
            "FROM generate_series(0, %s - 1) g",
            [device_.id, start, every_s, util_pct, power_w, every_s, power_w, util_pct / 2, count],
        )


def minutes(device_, start, count, power_w=300.0, util_pct=50.0):
    """1-minute rollups, each fully covered, with power_w x 60 s of energy."""
    from collector.models import Rollup1m

    Rollup1m.objects.bulk_create([
        Rollup1m(device=device_, bucket=start + timedelta(minutes=i), samples=60, covered_s=60.0,
                 util_mean_pct=util_pct, util_max_pct=util_pct, power_mean_w=power_w, power_max_w=power_w,
                 energy_j=power_w * 60.0, energy_from="counter", temp_max_c=60, mem_used_max_mib=2000)
        for i in range(count)
    ])


def job(name="run", team="research", steps_total=100, status="running", created_by=None, **config):
    """A job (not enqueued) moved straight to `status`."""
    from trainer.models import Job

    j = Job.start(name=name, team=team, env="arithmetic", config={"steps": steps_total, **config},
                  created_by=created_by, enqueue=False)
    if status != "queued":
        Job.objects.filter(pk=j.pk).update(status=status, started_at=j.created_at)
        j.refresh_from_db()
    return j


def steps(job_, count, start=None, every_s=10.0, eval_every=5, pass1=(30.0, 0.5), reward=(0.3, 0.002)):
    """Step rows 0..count (0: the baseline eval); eval pass@1 rises by pass1[1] a step."""
    from trainer.models import Job, Sample, Step

    start = start or datetime.now(UTC) - timedelta(seconds=every_s * (count + 1))
    rows, kept = [], []
    for s in range(count + 1):
        m = {} if s == 0 else {**STEP_METRICS, "train/reward_mean": reward[0] + reward[1] * s}
        if s % eval_every == 0:
            m["eval/pass1"] = pass1[0] + pass1[1] * s
        rows.append(Step(job=job_, step=s, at=start + timedelta(seconds=every_s * s), metrics=m,
                         reward_mean=m.get("train/reward_mean"), eval_pass1=m.get("eval/pass1"),
                         gen_tokens=m.get("performance/gen_tokens"), step_s=m.get("timing/step_s")))
        if s:
            kept.append(Sample(job=job_, step=s, index=0, prompt="12+30=", completion="42", reward=1.0,
                               advantage=0.5))
    Step.objects.bulk_create(rows)
    Sample.objects.bulk_create(kept)
    last = rows[-1]
    Job.objects.filter(pk=job_.pk).update(
        steps_done=count, baseline_pass1=pass1[0], latest_reward_mean=last.reward_mean,
        latest_pass1=max((r.eval_pass1 for r in rows if r.eval_pass1 is not None)))
    job_.refresh_from_db()
    return rows


def stint(job_, device_, start, end=None):
    from trainer.models import Stint

    return Stint.objects.create(job=job_, node=device_.node.name, device=device_.uuid, device_name=device_.model,
                                pid=1, started_at=start, ended_at=end)


def prices(per_hour="2.00", per_kwh="0.10", pue="1.5"):
    """One price for every device model (replacing the book)."""
    from costs.models import PriceEntry
    from costs.prices import add_price

    PriceEntry.objects.all().delete()
    return add_price("*", Decimal(per_hour), Decimal(per_kwh), Decimal(pue), datetime(2020, 1, 1).date())


def attribute(now=None):
    from costs.attribution import attribute as run

    return run(now=now)


def floor_minute(ts):
    return ts.replace(second=0, microsecond=0)


def minutes_of_today(count=3):
    """(start, count, end) of the last `count` closed minutes, all of today (UTC), for figures "today so far".

    In the day's first minutes there are fewer (waits out the very first one)."""
    import time

    now = datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if now - midnight < timedelta(minutes=1):
        time.sleep((midnight + timedelta(minutes=1) - now).total_seconds() + 0.1)
        now = datetime.now(UTC)
    end = floor_minute(now)
    count = min(count, int((end - midnight).total_seconds() // 60))
    return end - timedelta(minutes=count), count, end


# -- whole scenes, shared by the page tests and the browser tests ------------------------------------


def two_charged_jobs():
    """Two jobs on two GPUs of one node, priced $3.60/h, charged by attribution: "cheap" held its GPU 10
    minutes and evals every minute, "dear" 30 minutes and every 3 minutes, both from 30 points."""
    now = datetime.now(UTC)
    start = floor_minute(now) - timedelta(minutes=40)
    prices(per_hour="3.60", per_kwh="0", pue="1")
    n = node("gpu-a")
    d0, d1 = device(n, 0), device(n, 1)
    minutes(d0, start, 30)
    minutes(d1, start, 30)
    cheap, dear = job(name="cheap"), job(name="dear")
    stint(cheap, d0, start, start + timedelta(minutes=10))
    stint(dear, d1, start, start + timedelta(minutes=30))
    steps(cheap, 10, start=start, every_s=60, pass1=(30.0, 1.0))
    steps(dear, 10, start=start, every_s=180, pass1=(30.0, 0.5))
    attribute(now)
    return cheap, dear


def charged_fleet():
    """Node gpu-a (owner infra): GPU 0 at 400 W, held 20 minutes by job "grpo" (team research); GPU 1
    simulated at 200 W and idle; $3.60/h, $0.10/kWh, PUE 1.5; attributed. Returns the job."""
    now = datetime.now(UTC)
    start = floor_minute(now) - timedelta(minutes=40)
    prices(per_hour="3.60", per_kwh="0.10", pue="1.5")
    n = node("gpu-a", team="infra")
    d0, d1 = device(n, 0), device(n, 1, source="sim", simulated=True)
    minutes(d0, start, 30, power_w=400)
    minutes(d1, start, 30, power_w=200)
    grpo = job(name="grpo", team="research")
    stint(grpo, d0, start, start + timedelta(minutes=20))
    steps(grpo, 10, start=start, every_s=60)
    attribute(now)
    return grpo


"""Cost per token inside IPD (costs.tokens): every figure computed by hand here from the prices, the minutes
charged and the steps' timings, on devices named as the fake pynvml's Hopper and Rubin profiles name them.

The scene (each job on a device of its own, one eval at step 0 and one at step 10, 10 points gained):
- H100 ($3.60/h, $0.10/kWh, PUE 1.5; 400 W): two runs on "arithmetic" holding their GPU 10 minutes: $0.60 of
  device time + 400 W x 600 s = 240,000 J = 1/15 kWh x $0.15 = $0.01 of energy = $0.61 each; ten steps of
  generate 30 s, train 15 s, eval 5 s, step 55 s; 100,000 rollout tokens and 150,000 trained tokens a step.
- Rubin ($7.20/h, same energy price; 1,000 W): two runs on "arithmetic" holding 4 minutes: $0.48 + 240,000 J
  = $0.01 = $0.49 each; ten steps of generate 12 s, train 6 s, eval 2 s, step 22 s; the same tokens.
- one H100 run on "tool-use" (as the H100 ones): alone on its environment, so unranked.
"""

from datetime import timedelta
from decimal import Decimal

import pytest

from costs import tokens
from costs.models import PriceEntry
from costs.prices import add_price
from tests.collector.fake_pynvml import FakeGpu, FakeNvml
from tests.dashboard import builders as b
from trainer.models import Job, Step

pytestmark = pytest.mark.django_db

HOPPER = FakeGpu.hopper("GPU-h").name  # "NVIDIA H100 80GB HBM3"
RUBIN = FakeGpu.rubin_superchip("GPU-r").name  # "NVIDIA Rubin"
DAY0 = b.datetime(2020, 1, 1).date()


def priced():
    PriceEntry.objects.all().delete()
    add_price("*H100*", Decimal("3.60"), Decimal("0.10"), Decimal("1.5"), DAY0)
    add_price("*Rubin*", Decimal("7.20"), Decimal("0.10"), Decimal("1.5"), DAY0)
    add_price("*B200*", Decimal("5.40"), Decimal("0.10"), Decimal("1.5"), DAY0)


def nvml_devices(node, gpus, now):
    """The fake pynvml's GPUs as a node's agent registers them: read by the real NVML source, one sample written by
    the agent's writer (its model, architecture and scopes the fake's profile; its cost the seeded minutes)."""
    from django.db import connection

    from collector.agent.batch import Batch
    from collector.agent.sources.nvml import NvmlSource
    from collector.agent.writer import Writer
    from collector.models import Device

    readings = NvmlSource(node, nvml=FakeNvml(gpus)).read(now)
    Writer(connection.connection).write(Batch([r.device for r in readings],
                                              [(r.device.uuid, now, *r.values) for r in readings]))
    return [Device.objects.select_related("node").get(uuid=r.device.uuid) for r in readings]


def timed_steps(job, start, gen_s, train_s, eval_s, step_s, count=10, pass1=(30.0, 40.0)):
    rows = [Step(job=job, step=0, at=start, metrics={"eval/pass1": pass1[0], "timing/eval_s": 0.0},
                 eval_pass1=pass1[0])]
    for s in range(1, count + 1):
        m = {"timing/generate_s": gen_s, "timing/train_s": train_s, "timing/eval_s": eval_s, "timing/step_s": step_s,
             "performance/gen_tokens": 100_000, "performance/train_tokens": 150_000}
        if s == count:
            m["eval/pass1"] = pass1[1]
        rows.append(Step(job=job, step=s, at=start + timedelta(seconds=step_s * s), metrics=m,
                         gen_tokens=100_000, step_s=step_s, eval_pass1=m.get("eval/pass1")))
    Step.objects.bulk_create(rows)


def run_on(dev, env, start, held_min, watts, timings, name):
    job = b.job(name=name)
    Job.objects.filter(pk=job.pk).update(env=env)
    job.refresh_from_db()
    b.minutes(dev, start, held_min, power_w=watts)
    b.stint(job, dev, start, start + timedelta(minutes=held_min))
    timed_steps(job, start, *timings)
    return job


@pytest.fixture
def scene():
    priced()
    now = b.datetime.now(b.UTC)
    start = b.floor_minute(now) - timedelta(minutes=30)
    h = nvml_devices("hopper-a", [FakeGpu.hopper(f"GPU-h{i}") for i in range(3)], now)
    r = nvml_devices("rubin-a", [FakeGpu.rubin_superchip(f"GPU-r{i}") for i in range(2)], now)
    jobs = {
        "h1": run_on(h[0], "arithmetic", start, 10, 400.0, (30.0, 15.0, 5.0, 55.0), "h1"),
        "h2": run_on(h[1], "arithmetic", start, 10, 400.0, (30.0, 15.0, 5.0, 55.0), "h2"),
        "r1": run_on(r[0], "arithmetic", start, 4, 1000.0, (12.0, 6.0, 2.0, 22.0), "r1"),
        "r2": run_on(r[1], "arithmetic", start, 4, 1000.0, (12.0, 6.0, 2.0, 22.0), "r2"),
        "t1": run_on(h[2], "tool-use", start, 10, 400.0, (30.0, 15.0, 5.0, 55.0), "t1"),
    }
    b.attribute(now)
    return jobs


def D(x):
    return Decimal(str(x))


def test_a_jobs_dollars_per_point_is_its_cost_per_token_times_its_tokens_per_point(scene):
    d = tokens.job_decomposition(scene["h1"])
    cost = D("0.60") + D(240_000) / D(3_600_000) * D("0.10") * D("1.5")
    assert cost == D("0.61") and D(d["cost_usd"]) == D("0.610000")
    assert d["rollout_tokens"] == 1_000_000 and d["trained_tokens"] == 1_500_000
    assert D(d["usd_per_million_tokens"]) == D("0.610000")  # $0.61 / 1M tokens
    assert d["million_tokens_per_point"] == pytest.approx(0.1)  # 1M tokens / 10 points
    assert D(d["usd_per_point"]) == D("0.061000")
    assert D(d["usd_per_million_tokens"]) * D("0.1") == D(d["usd_per_point"]), "the product multiplies out"
    # Held 600 s: generation 300 s, training 150 s, evaluation 50 s, the rest of the steps 50 s, waiting 50 s.
    by_phase = {p["phase"]: D(p["usd"]) for p in d["phases"]}
    assert by_phase == {"generation": D("0.305"), "training": D("0.1525"),
                        "evaluation": (cost * 50 / 600).quantize(D("0.000001")),
                        "other": (cost * 50 / 600).quantize(D("0.000001")),
                        "waiting": cost - D("0.305") - D("0.1525") - 2 * (cost * 50 / 600).quantize(D("0.000001"))}
    assert sum(by_phase.values()) == cost, "the phases add up to the job's cost to the micro-dollar"
    assert D(d["generation_usd_per_million_tokens"]) == D("0.305000")
    assert D(d["training_usd_per_million_trained_tokens"]) == (D("0.1525") / D("1.5")).quantize(D("0.000001"))
    assert d["device_model"] == HOPPER and d["state"] == "ok"


def test_a_run_that_logs_no_phase_times_says_so_and_keeps_its_all_in_figures(scene):
    Step.objects.filter(job=scene["h2"]).update(metrics={"timing/step_s": 55.0})
    d = tokens.job_decomposition(scene["h2"])
    assert not d["split"] and d["phases"] == [] and "not split" in d["split_note"]
    assert d["generation_usd_per_million_tokens"] is None
    assert D(d["usd_per_million_tokens"]) == D("0.610000") and D(d["usd_per_point"]) == D("0.061000")


def test_the_hardware_page_compares_models_within_an_environment_and_ranks_only_two_runs_or_more(scene):
    rows = {(r["env"], r["model"]): r for r in tokens.hardware()}
    h, r, t = rows[("arithmetic", HOPPER)], rows[("arithmetic", RUBIN)], rows[("tool-use", HOPPER)]
    assert (h["runs"], r["runs"], t["runs"]) == (2, 2, 1)
    assert h["device_hours"] == pytest.approx(1200 / 3600) and r["device_hours"] == pytest.approx(480 / 3600)
    assert h["tokens_per_device_s"] == pytest.approx(2_000_000 / 1200)
    assert r["tokens_per_device_s"] == pytest.approx(2_000_000 / 480)
    assert h["tokens_per_joule"] == pytest.approx(2_000_000 / 480_000)
    assert r["tokens_per_joule"] == pytest.approx(2_000_000 / 480_000)
    assert r["mean_power_w"] == pytest.approx(1000.0)
    # Rubin: $0.49 a run, generation 120 of 240 s held = $0.245: $0.245 / 1M tokens.
    assert D(r["generation_usd_per_million_tokens"]) == D("0.245000") and D(h["generation_usd_per_million_tokens"]) == D("0.305000")
    assert D(r["usd_per_million_tokens"]) == D("0.490000") and D(h["usd_per_million_tokens"]) == D("0.610000")
    assert r["million_tokens_per_point"] == pytest.approx(0.1)
    assert D(r["usd_per_point"]) == D("0.049000") and D(h["usd_per_point"]) == D("0.061000")
    assert r["points_per_usd"] == pytest.approx(20 / 0.98) and h["points_per_usd"] == pytest.approx(20 / 1.22)
    assert (r["rank"], h["rank"], t["rank"]) == (1, 2, None), "one run on tool-use: figures, no ranking"
    assert D(t["usd_per_point"]) == D("0.061000")
    assert any("*Rubin*: $7.20/h" in p for p in r["prices"])
    team_rows = tokens.hardware(tokens.Filters(team="nobody"))
    assert team_rows == []


def test_what_if_with_a_typed_speed_up_is_priced_by_hand_and_labelled_an_estimate(scene):
    w = tokens.what_if(scene["h1"], RUBIN, speedup=4)
    # 600 device-seconds / 4 = 150 s on Rubin: 150 x $7.20/3600 = $0.30, plus 150 s x 1,000 W (Rubin's mean
    # power measured on arithmetic) = 150,000 J = 1/24 kWh x $0.10 x 1.5 = $0.00625.
    assert w["estimate"] is True and w["label"] == "estimate"
    assert w["projected_device_s"] == pytest.approx(150.0) and w["power_w"] == pytest.approx(1000.0)
    assert w["power_from"].startswith("measured")
    assert D(w["projected_cost_usd"]) == D("0.306250")
    assert w["projected_points_per_usd"] == pytest.approx(10 / 0.30625)
    # Measured ratio: Rubin 2,000,000 / 480 tokens per device-second over H100's 2,000,000 / 1,200 = 2.5.
    m = tokens.what_if(scene["h1"], RUBIN)
    assert m["speedup"] == pytest.approx(2.5) and "measured on arithmetic" in m["speedup_from"]
    # B200 never ran here: its rated power, said so. 600 / 2 = 300 s: 300 x $5.40/3600 = $0.45 + 300 s x 1,000 W
    # = 300,000 J = 1/12 kWh x $0.15 = $0.0125.
    r = tokens.what_if(scene["h1"], "NVIDIA B200", speedup=2)
    assert r["power_from"].startswith("rated") and D(r["projected_cost_usd"]) == D("0.462500")


def test_what_if_answers_bad_input_with_what_was_wrong(scene):
    assert "speed-up must be a number above 0" in tokens.what_if(scene["h1"], RUBIN, speedup=0)["error"]
    assert "no price in the price book" in tokens.what_if(scene["h1"], "Some TPU", speedup=2)["error"]
    assert "type a speed-up instead" in tokens.what_if(scene["t1"], RUBIN)["error"]
    assert "name the device model" in tokens.what_if(scene["h1"], " ", speedup=2)["error"]


def test_the_cost_review_splits_each_rows_dollars_by_phase_and_they_add_up(scene):
    from costs import report

    now = b.datetime.now(b.UTC)
    table = report.build(report.Period(now - timedelta(hours=2), now), "job")
    cols = [f"{p}_exact_usd" for p in report.PHASE_COLUMNS]
    h1 = next(r for r in table.rows if r["key"] == str(scene["h1"].pk))
    assert D(h1["generation_exact_usd"]) == D("0.305") and D(h1["training_exact_usd"]) == D("0.1525")
    for r in table.rows + [table.totals]:
        assert sum(D(r[c]) for c in cols) == D(r["attributed_exact_usd"]), r["key"] if "key" in r else "totals"
    by_model = {m["model"]: m for m in tokens.generation_by_model(now - timedelta(hours=2), now)}
    # Steps stamped 55 s (22 s) apart from 30 minutes ago: all ten of each run fall in the period.
    assert D(by_model[RUBIN]["usd_per_million"]) == D("0.245") and by_model[RUBIN]["tokens"] == 2_000_000
    assert D(by_model[HOPPER]["usd_per_million"]) == D("0.305") and by_model[HOPPER]["tokens"] == 3_000_000

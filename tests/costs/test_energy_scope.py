"""A superchip's energy is charged at module scope (GPU, CPU and memory), its host CPU is not charged twice,
and the cost review, its CSV and the costs page say whose energy each row charges."""

import csv
import io
from datetime import timedelta

from cost_builders import set_prices, utc
from django.db import connection

from collector import store
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer
from collector.models import Device
from costs.attribution import attribute

T0 = utc(2025, 6, 2, 10, 0)


def test_a_superchip_node_is_charged_its_module_energy_once_and_every_view_says_module_scope(fleet, client, viewer):
    set_prices(("*", "0", "1.00", "1", T0.date()))  # energy only: $1 per kWh
    superchip = DeviceInfo("GPU-gb", "gb-node", 0, "NVIDIA GB200", "nvml", power_scopes="module,memory")
    grace = DeviceInfo("CPU-gb", "gb-node", 1, "NVIDIA Grace", "host", power_estimated=True)
    h100 = DeviceInfo("GPU-h", "h-node", 0, "NVIDIA H100", "nvml")
    rows = []
    for s in range(0, 600, 10):  # 10 minutes, a sample every 10 s
        ts = T0 + timedelta(seconds=s)
        rows.append(("GPU-gb", ts, 90.0, 5.0, 900.0, 1e6 + 900.0 * s, 1, 2, 60.0, 1900, 80.0, 1200.0, 90.0,
                     5e6 + 1200.0 * s))
        rows.append(("CPU-gb", ts, 40.0, None, 250.0))
        rows.append(("GPU-h", ts, 90.0, 5.0, 700.0, 2e6 + 700.0 * s))
    Writer(connection.connection).write(Batch([superchip, grace, h100], rows))
    store.roll_up()
    job = fleet.job("on the superchip", "red")
    fleet.stint(job, Device.objects.get(uuid="GPU-gb"), T0, T0 + timedelta(minutes=10))
    attribute(now=T0 + timedelta(minutes=20), since=T0)
    client.force_login(viewer)

    by_node = {r["key"]: r for r in client.get("/api/costs", {"from": "2025-06-02", "to": "2025-06-02",
                                                             "group": "node"}).json()["rows"]}
    # 590 s x 1,200 W of the module (not 900 W of the GPU alone), and nothing for the Grace inside it:
    # 0.196667 kWh at $1.
    assert (by_node["gb-node"]["energy_kwh"], by_node["gb-node"]["energy_scope"]) == ("0.196667", "module")
    assert (by_node["h-node"]["energy_kwh"], by_node["h-node"]["energy_scope"]) == ("0.114722", "device")
    job_row = {r["key"]: r for r in client.get("/api/costs", {"from": "2025-06-02", "to": "2025-06-02",
                                                              "group": "job"}).json()["rows"]}[str(job.pk)]
    assert (job_row["energy_cost_usd"], job_row["energy_scope"]) == ("0.20", "module")

    exported = list(csv.DictReader(io.StringIO(client.get("/api/costs", {
        "from": "2025-06-02", "to": "2025-06-02", "group": "node", "format": "csv"}).content.decode())))
    assert {r["key"]: r["energy_scope"] for r in exported if r["key"] in by_node} == {"gb-node": "module",
                                                                                      "h-node": "device"}
    page = client.get("/costs", {"from": "2025-06-02", "to": "2025-06-02", "group": "node"}).content.decode()
    assert "module scope" in page


def test_the_job_page_shows_what_its_gpus_did_and_flags_one_throttled_for_much_of_its_time(fleet, client, viewer):
    set_prices(("*", "1.00", "0", "1", T0.date()))
    capped = DeviceInfo("GPU-cap", "n1", 0, "NVIDIA GB200", "nvml")
    cool = DeviceInfo("GPU-ok", "n1", 1, "NVIDIA GB200", "nvml")
    rows = []
    for s in range(0, 600, 10):
        ts = T0 + timedelta(seconds=s)
        # util, mem util, power, energy, mem used/total, temp, clock, SM active; module power, memory power, module
        # energy, tensor activity, occupancy, NVLink tx/rx, clocks event reasons, power limit
        rows.append(("GPU-cap", ts, 95.0, 5.0, 900.0, None, 1, 2, 60.0, 1500, 80.0, None, None, None, 30.0, 40.0,
                     None, None, 0x04 if s < 300 else 0, 1000.0))  # held at the power cap for half the samples
        rows.append(("GPU-ok", ts, 95.0, 5.0, 900.0, None, 1, 2, 60.0, 1900, 80.0, None, None, None, 70.0, 40.0,
                     None, None, 0x01 if s < 300 else 0, 1000.0))  # idle clocks are not a slowdown
    Writer(connection.connection).write(Batch([capped, cool], rows))
    store.roll_up()
    job = fleet.job("two gpus", "red")
    for uuid in ("GPU-cap", "GPU-ok"):
        fleet.stint(job, Device.objects.get(uuid=uuid), T0, T0 + timedelta(minutes=10))
    attribute(now=T0 + timedelta(minutes=20), since=T0)
    client.force_login(viewer)

    resp = client.get(f"/jobs/{job.pk}")
    activity = {a["device"]["uuid"]: a for a in resp.context["activity"]}
    assert activity["GPU-cap"]["tensor_active_pct"] == 30.0 and activity["GPU-ok"]["tensor_active_pct"] == 70.0
    assert activity["GPU-cap"]["throttled_share"] == 0.5 and activity["GPU-cap"]["throttled"]
    assert activity["GPU-ok"]["throttled_share"] == 0.0 and not activity["GPU-ok"]["throttled"]
    html = resp.content.decode()
    assert html.count("⚠ throttled") == 1 and "50%" in html


def test_the_job_page_gives_its_mfu_beside_tensor_activity_and_flags_a_busy_gpu_with_idle_tensor_cores(
        fleet, client, viewer):
    from trainer.models import Step

    set_prices(("*", "1.00", "0", "1", T0.date()))
    h100s = [DeviceInfo(f"GPU-h{i}", "hgx", i, "NVIDIA H100 80GB HBM3", "nvml") for i in range(2)]
    rows = []
    for s in range(0, 600, 10):
        ts = T0 + timedelta(seconds=s)
        for i, tensor in enumerate((45.0, 4.0)):  # GPU 1: 95% busy, tensor cores busy 4% of the time
            rows.append((f"GPU-h{i}", ts, 95.0, 5.0, 600.0, None, 1, 2, 60.0, 1900, 80.0, None, None, None, tensor,
                         40.0, None, None, 0, 700.0))
    Writer(connection.connection).write(Batch(h100s, rows))
    store.roll_up()
    job = fleet.job("mfu", "red")
    for info in h100s:
        fleet.stint(job, Device.objects.get(uuid=info.uuid), T0, T0 + timedelta(minutes=10))
    attribute(now=T0 + timedelta(minutes=20), since=T0)
    # Two steps of 989e12 FLOPs, in 2 s and 1 s: 1,978e12 FLOPs in 3 s against 2 x 989 TFLOP/s, 33.3 %.
    for step, (flops, secs) in enumerate(((989e12, 2.0), (989e12, 1.0)), start=1):
        Step.objects.create(job=job, step=step, metrics={"performance/model_flops": flops, "timing/step_s": secs})
    client.force_login(viewer)

    resp = client.get(f"/jobs/{job.pk}")
    mfu = resp.context["mfu"]
    assert mfu["how"] == "estimated" and abs(mfu["mfu"] - 1 / 3) < 1e-12 and mfu["peak_tflops"] == 1978.0
    html = resp.content.decode()
    assert "Model FLOPs utilization (MFU): <strong>33.3%</strong>" in html and "≈ estimated" in html
    assert html.count("⚠ busy, tensor cores idle") == 1

    # A trainer that reports its own MFU (veRL's perf/mfu/actor, ingested as performance/mfu) is shown as reported.
    Step.objects.filter(job=job).update(metrics={"performance/mfu": 0.42})
    assert '42.0%</strong> <span class="hint">as the trainer reported it' in client.get(f"/jobs/{job.pk}").content.decode()
    # On a CPU there is no published peak: no MFU, and the page says why.
    cpu_job = fleet.job("on a cpu", "red")
    cpu = Writer(connection.connection)
    cpu.write(Batch([DeviceInfo("CPU-x", "box", 0, "AMD EPYC", "host", power_estimated=True)],
                    [("CPU-x", T0 + timedelta(seconds=s), 50.0, None, 100.0) for s in range(0, 600, 10)]))
    store.roll_up()
    fleet.stint(cpu_job, Device.objects.get(uuid="CPU-x"), T0, T0 + timedelta(minutes=10))
    attribute(now=T0 + timedelta(minutes=20), since=T0)
    Step.objects.create(job=cpu_job, step=1, metrics={"performance/model_flops": 1e9, "timing/step_s": 1.0})
    page = client.get(f"/jobs/{cpu_job.pk}").content.decode()
    assert "— no peak FLOP/s known for AMD EPYC" in page

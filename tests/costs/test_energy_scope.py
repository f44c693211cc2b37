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
    page = client.get("/costs/", {"from": "2025-06-02", "to": "2025-06-02", "group": "node"}).content.decode()
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

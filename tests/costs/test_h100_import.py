"""The real H100 nvidia-smi log, imported with import_smi, costs what its power.draw column says.

The independent figure: the CSV read with the csv module, power.draw
integrated by the trapezoid rule between consecutive samples, device time the
span between them, priced by hand. The system's figure goes through the whole
path: import_smi (which rolls up and attributes the window it imported) → /api/costs.
"""

import csv
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from io import StringIO

from cost_builders import set_prices
from django.core.management import call_command

PER_HOUR, PER_KWH, PUE = Decimal("90.00"), Decimal("40.00"), Decimal("1.25")


def independent_cost(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = [h.strip() for h in rows[0]]
    ts_col, power_col = header.index("timestamp"), header.index("power.draw [W]")
    points = [(datetime.strptime(r[ts_col].strip(), "%Y/%m/%d %H:%M:%S.%f"), float(r[power_col].strip().split()[0]))
              for r in rows[1:]]
    seconds = joules = 0.0
    for (t0, p0), (t1, p1) in zip(points, points[1:]):
        dt = (t1 - t0).total_seconds()
        seconds += dt
        joules += (p0 + p1) / 2 * dt
    cost = Decimal(repr(seconds)) / 3600 * PER_HOUR + Decimal(repr(joules)) / 3_600_000 * PER_KWH * PUE
    return seconds, joules, cost


def test_the_imported_h100_log_costs_what_its_power_column_says(db, client, viewer, telemetry_data):
    path = telemetry_data / "smi_h100_pcie_burst.csv"
    set_prices(("*H100*", PER_HOUR, PER_KWH, PUE, "2020-01-01"), ("*", "0", "0", "1", "2020-01-01"))
    call_command("import_smi", str(path), "--node", "h100-box", "--model", "NVIDIA H100 PCIe",
                 "--label", "team=bench", stdout=StringIO())
    seconds, joules, cost = independent_cost(path)
    client.force_login(viewer)

    body = client.get("/api/costs", {"from": "2023-08-24", "to": "2023-08-24", "group": "node"}).json()

    [row] = body["rows"]
    assert row["key"] == "h100-box" and row["energy_from"] == "power"
    assert row["total_usd"] == str(cost.quantize(Decimal("0.01"), ROUND_HALF_UP))
    assert abs(float(row["device_hours"]) - seconds / 3600) < 0.0001
    assert abs(float(row["energy_kwh"]) - joules / 3_600_000) < 0.000002
    assert row["idle_usd"] == row["total_usd"]  # no job ran: all of it is idle, charged to the node's team
    assert body["totals"]["fleet_usd"] == row["total_usd"]

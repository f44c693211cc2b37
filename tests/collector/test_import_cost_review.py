"""One import command brings an old log into the cost review: no waiting for, and no missing by, the periodic tasks."""

import csv
from datetime import datetime
from io import StringIO

import pytest
from django.core.management import call_command

from costs.models import Allocation


def span_and_energy(path):
    """Device seconds and trapezoid joules straight from the CSV (every interval here is under the gap limit)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, skipinitialspace=True))
    t = [datetime.strptime(r["timestamp"], "%Y/%m/%d %H:%M:%S.%f") for r in rows]
    p = [float(r["power.draw [W]"].split()[0]) for r in rows]
    seconds = (t[-1] - t[0]).total_seconds()
    joules = sum((t[i] - t[i - 1]).total_seconds() * (p[i] + p[i - 1]) / 2 for i in range(1, len(rows)))
    return seconds, joules


def test_importing_last_years_h100_log_puts_it_on_the_cost_review_at_once(db, client, viewer, telemetry_data):
    path = telemetry_data / "smi_h100_pcie_burst.csv"
    out = StringIO()

    call_command("import_smi", str(path), "--node", "h100-box", "--model", "NVIDIA H100 PCIe",
                 "--label", "team=bench", stdout=out)

    assert "rolled up and attributed 2023-08-24 14:41 to 2023-08-24 14:4" in out.getvalue()
    assert "the cost review (/costs, /api/costs, cost_report) shows it now" in out.getvalue()
    assert Allocation.objects.filter(minute__date="2023-08-24").exists()
    seconds, joules = span_and_energy(path)
    client.force_login(viewer)
    body = client.get("/api/costs", {"from": "2023-08-24", "to": "2023-08-24", "group": "node"}).json()
    [row] = body["rows"]
    assert row["key"] == "h100-box" and row["team"] == "bench"
    assert float(row["device_hours"]) == pytest.approx(seconds / 3600, abs=0.0001)
    assert float(row["energy_kwh"]) == pytest.approx(joules / 3_600_000, abs=0.000002)
    page = client.get("/costs", {"from": "2023-08-24", "to": "2023-08-24", "group": "node"})
    assert page.status_code == 200 and "h100-box" in page.content.decode()

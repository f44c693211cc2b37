"""GET /api/fleet: every node with status and devices, each with its latest sample and honest flags."""

from datetime import timedelta

from django.utils import timezone

from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer


def write(conn, device, ts, interval_s=1.0, labels=None):
    Writer(conn).write(
        Batch([device], [(device.uuid, ts, 90.0, 40.0, 650.5, 1234.5, 2048, 81920, 71.0, 1980, 55.0)],
              labels=labels or {}, interval_s=interval_s)
    )

def test_it_lists_nodes_with_status_devices_flags_and_latest_samples(client, viewer, pg_conn):
    now = timezone.now()
    gpu = DeviceInfo("GPU-f", "fresh-node", 0, "NVIDIA H100 80GB HBM3", "nvml", mem_total_mib=81920)
    sim = DeviceInfo("SIM-s", "old-node", 0, "Sim Rubin-class (placeholder)", "sim", simulated=True)
    cpu = DeviceInfo("CPU-c", "old-node", 1, "AMD EPYC", "host", power_estimated=True)
    write(pg_conn, gpu, now - timedelta(seconds=1), labels={"team": "rl"})
    write(pg_conn, sim, now - timedelta(seconds=10))
    write(pg_conn, cpu, now - timedelta(seconds=20))
    client.force_login(viewer)

    response = client.get("/api/fleet")

    assert response.status_code == 200
    nodes = {n["name"]: n for n in response.json()["nodes"]}
    fresh, old = nodes["fresh-node"], nodes["old-node"]
    assert (fresh["status"], fresh["labels"], fresh["owner"]) == ("ok", {"team": "rl"}, "rl")
    assert old["status"] == "stale"  # newest sample 10 s old, interval 1 s
    [device] = fresh["devices"]
    assert device["uuid"] == "GPU-f" and device["model"] == "NVIDIA H100 80GB HBM3"
    assert (device["simulated"], device["power_estimated"], device["source"]) == (False, False, "nvml")
    assert device["latest"] == {
        "ts": device["latest"]["ts"], "util_pct": 90.0, "mem_util_pct": 40.0, "power_w": 650.5, "energy_j": 1234.5,
        "mem_used_mib": 2048, "mem_total_mib": 81920, "temp_c": 71.0, "sm_clock_mhz": 1980, "sm_active_pct": 55.0,
        # What an H100 read with the first fields only does not have.
        **dict.fromkeys(("module_power_w", "memory_power_w", "module_energy_j", "tensor_active_pct", "sm_occupancy_pct",
                         "nvlink_tx_bytes_s", "nvlink_rx_bytes_s", "clock_event_reasons", "power_limit_w")),
    }
    flags = {d["uuid"]: (d["simulated"], d["power_estimated"]) for d in old["devices"]}
    assert flags == {"SIM-s": (True, False), "CPU-c": (False, True)}
    labels = {d["uuid"]: d["label"] for d in old["devices"]}
    assert labels["CPU-c"] == "CPU" and device["label"] == "GPU 0", "devices are named by kind"
    assert old["newest_sample_at"] is not None

def test_a_script_with_a_token_may_read_it(client, viewer, api_token, pg_conn):
    response = client.get("/api/fleet", headers={"Authorization": f"Bearer {api_token(viewer)}"})

    assert response.status_code == 200 and response.json()["nodes"] == []

def test_anonymous_callers_get_401_and_users_without_a_role_403(client, outsider, db):
    assert client.get("/api/fleet").status_code == 401
    client.force_login(outsider)
    assert client.get("/api/fleet").status_code == 403

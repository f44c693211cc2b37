"""The sim source: a deterministic synthetic fleet, every device flagged simulated."""

from datetime import datetime, timedelta, timezone

from collector.agent import schema
from collector.agent.sources.sim import MAX_W, SimSource

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def run(source, ticks):
    return [source.read(T0 + timedelta(seconds=i)) for i in range(ticks)]


def test_it_makes_nodes_times_gpus_devices_all_flagged_simulated():
    [readings] = run(SimSource(nodes=3, gpus=4, seed=1), 1)

    assert len(readings) == 12
    assert {r.device.node for r in readings} == {"sim-node-00", "sim-node-01", "sim-node-02"}
    assert all(r.device.simulated and r.device.source == "sim" for r in readings)
    assert "placeholder" in readings[0].device.model
    assert len({r.device.uuid for r in readings}) == 12


def test_the_same_seed_gives_the_same_fleet_and_another_seed_another():
    a = run(SimSource(gpus=2, seed=7), 20)
    b = run(SimSource(gpus=2, seed=7), 20)
    c = run(SimSource(gpus=2, seed=8), 20)

    assert [[r.values for r in t] for t in a] == [[r.values for r in t] for t in b]
    assert [[r.values for r in t] for t in a] != [[r.values for r in t] for t in c]


def test_its_energy_counter_only_grows_and_power_stays_in_range():
    ticks = run(SimSource(gpus=8, seed=3), 120)
    e = schema.SAMPLE_FIELDS.index("energy_j")
    p = schema.SAMPLE_FIELDS.index("power_w")

    for g in range(8):
        energies = [t[g].values[e] for t in ticks]
        assert energies == sorted(energies)
        assert all(0 < t[g].values[p] <= MAX_W for t in ticks)

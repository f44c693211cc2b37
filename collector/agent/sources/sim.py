"""A synthetic fleet for demos and load tests; every device is flagged `simulated`.

The defaults describe a "Rubin-class" accelerator only as placeholders, not
vendor figures: they make charts look like a modern fleet and nothing more.
Deterministic for a given seed and sequence of tick times.
"""

import random
import uuid as uuidlib

from ..batch import DeviceInfo, Reading

# Placeholders, not vendor figures.
MODEL = "Sim Rubin-class (placeholder)"
IDLE_W = 180.0
MAX_W = 1800.0
MEM_TOTAL_MIB = 288 * 1024
SM_CLOCK_MHZ = 2000


class _Gpu:
    __slots__ = ("info", "rng", "busy", "util", "energy_j", "last_ts", "power_w")

    def __init__(self, info, rng):
        self.info = info
        self.rng = rng
        self.busy = rng.random() < 0.7
        self.util = 0.0
        self.energy_j = rng.uniform(1e6, 1e8)  # counters start wherever the driver left them
        self.last_ts = None
        self.power_w = IDLE_W


class SimSource:
    name = "sim"

    def __init__(self, nodes=1, gpus=8, seed=0):
        if nodes < 1 or gpus < 1:
            raise ValueError(f"nodes and gpus must be >= 1, got nodes={nodes}, gpus={gpus}")
        self.gpus = []
        for n in range(nodes):
            node = f"sim-node-{n:02d}"
            for g in range(gpus):
                uuid = "SIM-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{seed}/{node}/{g}"))
                info = DeviceInfo(
                    uuid=uuid,
                    node=node,
                    index=g,
                    model=MODEL,
                    source="sim",
                    simulated=True,
                    mem_total_mib=MEM_TOTAL_MIB,
                )
                self.gpus.append(_Gpu(info, random.Random(f"{seed}/{uuid}")))

    def read(self, ts):
        readings = []
        for gpu in self.gpus:
            rng = gpu.rng
            if rng.random() < 0.01:  # jobs start and end now and then
                gpu.busy = not gpu.busy
            target = 92.0 if gpu.busy else 0.0
            gpu.util = min(100.0, max(0.0, gpu.util + 0.3 * (target - gpu.util) + rng.gauss(0, 3)))
            power = IDLE_W + (MAX_W - IDLE_W) * gpu.util / 100.0 * rng.uniform(0.9, 1.0)
            if gpu.last_ts is not None:
                dt = (ts - gpu.last_ts).total_seconds()
                gpu.energy_j += dt * (power + gpu.power_w) / 2
            gpu.last_ts, gpu.power_w = ts, power
            busy_share = gpu.util / 100.0
            readings.append(
                Reading(
                    gpu.info,
                    (
                        round(gpu.util, 1),
                        round(busy_share * 60.0, 1),
                        round(power, 1),
                        gpu.energy_j,
                        int(MEM_TOTAL_MIB * (0.05 + 0.8 * busy_share)),
                        MEM_TOTAL_MIB,
                        round(35.0 + 45.0 * busy_share, 1),
                        SM_CLOCK_MHZ if gpu.busy else 800,
                        round(gpu.util * 0.75, 1),
                    ),
                )
            )
        return readings

    def close(self):
        pass

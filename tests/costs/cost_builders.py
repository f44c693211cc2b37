"""Builders for cost tests: nodes, devices, 1-minute rollups, jobs, stints, evals and prices, in the real tables."""

from datetime import datetime, timedelta, timezone
from decimal import Decimal

UTC = timezone.utc


def utc(*args):
    return datetime(*args, tzinfo=UTC)


class Fleet:
    """Writes a small fleet straight into the collector's and trainer's tables."""

    def __init__(self):
        self.now = datetime.now(UTC)
        self._uuid = 0

    def node(self, name, team=None):
        from collector.models import Node

        labels = {"team": team} if team else {}
        return Node.objects.create(name=name, labels=labels, first_seen=self.now, registered_at=self.now)

    def device(self, node, model="NVIDIA H100 80GB HBM3", source="nvml", uuid=None, simulated=False,
               power_estimated=False):
        from collector.models import Device

        self._uuid += 1
        return Device.objects.create(
            uuid=uuid or f"GPU-test-{self._uuid:04d}", node=node, index=node.devices.count(), model=model,
            source=source, simulated=simulated, power_estimated=power_estimated,
            first_seen=self.now, registered_at=self.now,
        )

    def minutes(self, device, start, count, power_w=None, covered_s=60.0, energy_j=None, energy_from="counter"):
        """One rollup per minute from `start`: `covered_s` seconds and `energy_j` (or power_w x covered_s) joules."""
        from collector.models import Rollup1m

        rows = []
        for i in range(count):
            joules = energy_j if energy_j is not None else power_w * covered_s
            rows.append(Rollup1m(device=device, bucket=start + timedelta(minutes=i), samples=60,
                                 covered_s=covered_s, energy_j=joules, energy_from=energy_from,
                                 power_mean_w=power_w))
        Rollup1m.objects.bulk_create(rows)

    def job(self, name, team, budget_usd=None, status="running"):
        from trainer.models import Job

        return Job.objects.create(name=name, team=team, env="arithmetic", config={"steps": 100},
                                  budget_usd=budget_usd, status=status)

    def stint(self, job, device, start, end=None, node=None):
        from trainer.models import Stint

        dev = "cpu" if device.source == "host" else device.uuid
        return Stint.objects.create(job=job, node=node or device.node.name, device=dev, pid=1, started_at=start,
                                    ended_at=end)

    def evals(self, job, *points):
        """Record eval scores: (step, at, pass1) ..."""
        from trainer.models import Step

        for step, at, pass1 in points:
            Step.objects.create(job=job, step=step, at=at, eval_pass1=pass1, metrics={"eval/pass1": pass1},
                                gen_tokens=None if step == 0 else 1000)


def set_prices(*entries):
    """Replace the price book: (pattern, per_hour, per_kwh, pue, from_date) ..."""
    from costs.models import PriceEntry
    from costs.prices import add_price

    PriceEntry.objects.all().delete()
    return [add_price(p, Decimal(h), Decimal(k), Decimal(pue), day) for p, h, k, pue, day in entries]

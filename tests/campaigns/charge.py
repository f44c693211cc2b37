"""Charge tiny CPU runs with known telemetry: their stints and evals moved into past minutes that a host
device of this node reports, then those minutes attributed, as the cost task would."""

import socket
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone


def charge(jobs, power_w=100.0, per_hour="3.60", per_kwh="0.10", pue="1.5"):
    """Move each job's stints and steps to its own 3-minute slot an hour ago and attribute those minutes."""
    from collector.models import Device, Node, Rollup1m
    from costs.attribution import attribute_window
    from costs.models import PriceEntry
    from costs.prices import add_price
    from trainer.models import Step, Stint

    now = timezone.now()
    t0 = now.replace(second=0, microsecond=0) - timedelta(hours=1)
    node = Node.objects.create(name=socket.gethostname(), labels={}, first_seen=t0, registered_at=t0)
    device = Device.objects.create(uuid="host-test", node=node, index=0, model="test cpu", source="host",
                                   first_seen=t0, registered_at=t0)
    Rollup1m.objects.bulk_create([Rollup1m(device=device, bucket=t0 + timedelta(minutes=i), samples=60, covered_s=60.0,
                                           energy_j=power_w * 60, energy_from="counter", power_mean_w=power_w)
                                  for i in range(3 * len(jobs) + 1)])
    PriceEntry.objects.all().delete()
    add_price("*", Decimal(per_hour), Decimal(per_kwh), Decimal(pue), t0.date() - timedelta(days=1))
    for k, job in enumerate(jobs):
        stints = list(Stint.objects.filter(job=job).order_by("started_at"))
        if not stints:
            continue
        shift = t0 + timedelta(minutes=3 * k, seconds=5) - stints[0].started_at
        for s in stints:
            Stint.objects.filter(pk=s.pk).update(started_at=s.started_at + shift,
                                                 ended_at=s.ended_at + shift if s.ended_at else None)
        for step in Step.objects.filter(job=job):
            Step.objects.filter(pk=step.pk).update(at=step.at + shift)
    attribute_window(t0, t0 + timedelta(minutes=3 * len(jobs) + 1), now=now)

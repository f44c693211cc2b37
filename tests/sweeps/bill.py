"""Charge the sweep tests' trials a known price per step: each job's stint is moved to start two hours ago on a
device of its own, its step k at exactly k minutes after that, and each minute up to its newest step carries a
rollup of that device, attributed as the cost task would. One minute costs MINUTE_USD: $3.60 an hour of device time
plus 6,000 J at $0.10/kWh with a PUE of 1.5 = $0.06 + $0.00025."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

MINUTE_USD = Decimal("0.06025")


def prices():
    from costs.models import PriceEntry
    from costs.prices import add_price

    PriceEntry.objects.all().delete()
    add_price("*", Decimal("3.60"), Decimal("0.10"), Decimal("1.5"), timezone.now().date() - timedelta(days=2))


def bill(job):
    """Charge `job` one minute per step it has logged so far; return the steps charged."""
    from collector.models import Device, Node, Rollup1m
    from costs.attribution import attribute_window
    from trainer.models import Step, Stint

    steps = sorted(Step.objects.filter(job=job).values_list("step", "pk"))
    stint = Stint.objects.filter(job=job).order_by("started_at").first()
    if not steps or stint is None:
        return 0
    # Laid from the job's own creation, so a second charge of the same job (at its next gate) lays the same minutes,
    # whichever minute of the clock it comes in.
    t0 = job.created_at.replace(second=0, microsecond=0) - timedelta(hours=2)
    node = Node.objects.filter(name=stint.node).first() or Node.objects.create(
        name=stint.node, labels={}, first_seen=t0, registered_at=t0)
    uuid = f"GPU-sweep-test-{job.pk}"
    device, _ = Device.objects.get_or_create(uuid=uuid, defaults={
        "node": node, "index": 90 + job.pk % 10, "model": "test gpu", "source": "nvml", "first_seen": t0,
        "registered_at": t0})
    Stint.objects.filter(pk=stint.pk).update(started_at=t0, device=uuid, node=node.name)
    for k, pk in steps:
        Step.objects.filter(pk=pk).update(at=t0 + timedelta(minutes=k))
    newest = steps[-1][0]
    for k in range(newest):
        Rollup1m.objects.update_or_create(device=device, bucket=t0 + timedelta(minutes=k), defaults={
            "samples": 60, "covered_s": 60.0, "energy_j": 6000.0, "energy_from": "counter", "power_mean_w": 100.0})
    attribute_window(t0, t0 + timedelta(minutes=max(newest, 1)))
    return newest

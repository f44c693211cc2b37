"""Budget stops: the attribute task stops a job whose cost reaches its budget; a real tiny job ends budget_exhausted."""

import socket
from datetime import timedelta
from decimal import Decimal

import pytest
from cost_builders import set_prices, utc
from django.utils import timezone

from costs.attribution import attribute
from costs.budget import check_budgets
from costs.tasks import attribute as attribute_task

T0 = utc(2025, 5, 1, 12, 0)


def test_a_job_whose_cost_reaches_its_budget_is_asked_to_stop_and_one_below_is_not(fleet):
    set_prices(("*", "6.00", "0", "1", T0.date()))  # $0.10 per device-minute
    gpu1, gpu2 = fleet.device(fleet.node("n1")), fleet.device(fleet.node("n2"))
    fleet.minutes(gpu1, T0, 10, power_w=100)
    fleet.minutes(gpu2, T0, 10, power_w=100)
    over = fleet.job("over", "red", budget_usd=Decimal("1.00"))
    under = fleet.job("under", "red", budget_usd=Decimal("1.01"))
    fleet.stint(over, gpu1, T0)
    fleet.stint(under, gpu2, T0)
    attribute(now=T0 + timedelta(minutes=10))

    assert check_budgets() == [over.pk]

    over.refresh_from_db(), under.refresh_from_db()
    assert over.budget_stop_requested and over.status == "running"
    assert not under.budget_stop_requested
    assert over.status_changes.count() == 0  # the trainer ends it at its next step boundary
    assert check_budgets() == []  # asked once


def test_a_budget_of_a_tenth_of_a_cent_is_not_spent_by_0_0004_and_is_by_0_0011(fleet):
    set_prices(("*", "0.036", "0", "1", T0.date()))  # $0.00001 per device-second
    gpu1, gpu2 = fleet.device(fleet.node("n1")), fleet.device(fleet.node("n2"))
    fleet.minutes(gpu1, T0, 1, power_w=100, covered_s=40)  # 40 s: $0.0004
    fleet.minutes(gpu2, T0, 2, power_w=100, covered_s=55)  # 110 s: $0.0011
    under = fleet.job("under", "red", budget_usd=Decimal("0.001"))
    over = fleet.job("over", "red", budget_usd=Decimal("0.001"))
    fleet.stint(under, gpu1, T0)
    fleet.stint(over, gpu2, T0)
    attribute(now=T0 + timedelta(minutes=2))

    # Rounded to the cent, $0.0004 and the $0.001 budget were both $0.00: stopped at the first attribution.
    assert check_budgets() == [over.pk]

    under.refresh_from_db(), over.refresh_from_db()
    assert under.budget_usd == Decimal("0.001") and not under.budget_stop_requested
    assert over.budget_stop_requested
    assert over.stop_reason == "spend $0.0011 reached the budget $0.001", "amounts with the precision they need"


@pytest.fixture(scope="module")
def tiny_models_dir(tmp_path_factory):
    """A tiny base policy (as the trainer's tests build it), so a real job takes seconds."""
    from trainer.rl.model import GPTConfig
    from trainer.rl.pretrain import pretrain

    path = tmp_path_factory.mktemp("models")
    pretrain("arithmetic", path, "cpu", model_config=GPTConfig(n_layer=1, n_head=2, n_embd=32),
             max_steps=30, batch_size=32, target_pass1=101.0, probe_every=1000, probe_size=4)
    return path


def test_a_real_tiny_job_over_budget_ends_as_budget_exhausted(fleet, settings, tiny_models_dir, tmp_path):
    from tests.trainer.helpers import TINY
    from trainer import runner
    from trainer.models import Job, Stint

    (tmp_path / "models").symlink_to(tiny_models_dir, target_is_directory=True)
    settings.DATA_DIR = tmp_path
    set_prices(("cpu", "60.00", "0.30", "1.2", T0.date()), ("*", "1.00", "0.10", "1", T0.date()))
    # The host device the collector registers for this machine: a cpu stint on this node is charged to it.
    host = fleet.device(fleet.node(socket.gethostname(), team="infra"), model="Test CPU", source="host",
                        power_estimated=True)
    job = Job.start(name="tiny", team="research", env="arithmetic", config={**TINY, "steps": 50},
                    budget_usd="1.00", device="cpu", enqueue=False)
    spent = {}

    def after_step(job, step, metrics):
        if step != 1:
            return
        # Two minutes of telemetry behind the stint, as the collector would have rolled them up.
        now = timezone.now().replace(second=0, microsecond=0)
        Stint.objects.filter(job=job).update(started_at=now - timedelta(minutes=2))
        fleet.minutes(host, now - timedelta(minutes=2), 2, power_w=150)
        spent["summary"] = attribute_task()  # the periodic task body: attribute, then check budgets

    job = runner.run(job.pk, progress=after_step)

    assert spent["summary"]["budget_stops"] == [job.pk]  # 2 minutes at $1/minute >= $1.00
    assert job.status == "budget_exhausted" and job.steps_done == 1
    final = job.status_changes.last()
    assert final.to_status == "budget_exhausted"
    assert final.reason.startswith("spend $") and "reached the budget $1.00" in final.reason
    assert Stint.objects.get(job=job).end_reason == "budget_exhausted"

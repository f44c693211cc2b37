"""Stop-loss on an outside run: the rule stops it through the tracking API's stop tag, which the client
package's StopCallback reads, and the job ends stopped with the rule's reason. The real MLflow client."""

from datetime import timedelta

import pytest

from alerts import stoploss as evaluate
from costs.attribution import attribute
from tests.alerts.test_stoploss import T0, evals
from tests.costs.cost_builders import Fleet, set_prices
from trainer.models import Job


@pytest.fixture
def fleet(db):
    return Fleet()


def test_an_external_run_is_stopped_through_its_callback_and_ends_stopped_with_the_reason(fleet, mlflow_client):
    exp = mlflow_client.create_experiment("flat-external")
    rid = mlflow_client.create_run(exp).info.run_id
    job = Job.objects.get(run__run_id=rid)
    set_prices(("*", "60.00", "0", "1", T0.date()))
    gpu = fleet.device(fleet.node("n-ext"))
    fleet.minutes(gpu, T0, 10, power_w=100)
    fleet.stint(job, gpu, T0)
    evals(job, [(0, 30, 10.0), (10, 210, 20.0), (20, 390, 20.5), (30, 570, 20.6)])
    attribute(now=T0 + timedelta(minutes=10))
    job.set_stop_loss({"usd": "5", "points": 2})

    assert evaluate.check(now=T0 + timedelta(minutes=10)) == [job.pk]
    # What the client package's StopCallback reads at its next step.
    assert mlflow_client.get_run(rid).data.tags["yardstick.stop_requested"] == "true"
    mlflow_client.set_terminated(rid, "KILLED")
    job.refresh_from_db()
    assert job.status == "stopped"
    assert job.status_changes.last().reason.startswith("stop-loss: steps 10 to 30 cost $6.00")
    # An outside run logs no configured step count: nothing to project.
    assert job.stop_loss_outcome["saved_usd"] is None
    assert job.stop_loss_outcome["projection"] == "no projection: the run has no configured step count"



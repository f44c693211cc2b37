"""What a launched job on a cluster costs, by where it ran: a cluster's node is tied to the Yardstick node an agent
measures there by name or by address (Ray names its nodes by IP, the agent by host name); a cpu recipe's job holds
the host device of the measured node it runs on, and is charged for it; where no agent measures the node its cost
is "not measured" on its page, in the Jobs list and in the API, never $0.00.

The follower's real pass (launch.remote.follow) runs against the real database; what Ray answers (its job's state
and where its driver runs, as launch/on_ray.py reads them) is given here, so no Ray is needed (tests/launch/test_ray.py
runs a job on a real head and a real agent)."""

from datetime import datetime, timedelta, timezone

import pytest

from costs.intelligence import job_money
from launch import on_ray, remote
from launch.kind import start
from launch.models import Cluster, Launch, Recipe
from launch.remote import RemoteNode, RemoteState
from tests.dashboard.builders import attribute, device, floor_minute, minutes, node, prices
from trainer.models import Job, Status, Stint

pytestmark = pytest.mark.django_db(transaction=True)
UTC = timezone.utc
# Nothing listens there: only what the test gives as Ray's answer reaches the follower.
NOWHERE = "http://127.0.0.1:9"


def ray_node(name, address):
    return RemoteNode(name=name, address=address, alive=True, head=False, gpus=0, cpus=8)


def running_on(admin_user, recipe="on-ray", devices=None):
    """A job submitted to the Ray cluster "lab" (as the follower leaves it after its submission)."""
    if not Cluster.objects.filter(name="lab").exists():
        Cluster.register({"name": "lab", "address": NOWHERE}, admin_user)
    Recipe.define(recipe, {"argv": ["python", "train.py"], "executor": "ray",
                           "devices": devices or {"kind": "cpu", "count": 1}}, admin_user)
    job = start(recipe=recipe, team="rl", created_by=admin_user, cluster="lab")
    assert job.claim("submitted by Yardstick's follower to ray cluster lab")
    Launch.objects.filter(pk=job.pk).update(remote_id=f"yardstick-job-{job.pk}-1", starts=1, remote_status="PENDING")
    return job


@pytest.fixture
def ray_says(monkeypatch):
    """What Ray answers of a job: set `answer["state"]` (a RemoteState, as RayExecutor.state makes it)."""
    answer = {"state": None}
    monkeypatch.setattr(on_ray.RayExecutor, "state", lambda self, cluster, remote_id: answer["state"])
    monkeypatch.setattr(on_ray.RayExecutor, "log", lambda self, cluster, remote_id, job_dir="": "")
    return answer


def on_driver_node(status, ip, start, end=None):
    """RayExecutor.state's answer for a job whose driver runs on the node Ray names `ip` (its name is its IP)."""
    return RemoteState(status=status, allocation={
        "nodes": ip, "hosts": [ip], "addresses": [ip], "node_count": 1, "ray_node_id": "a1", "gpus": 0, "cpus": 1,
        "start": start.isoformat(), "end": end.isoformat() if end else None})


def test_a_ray_node_named_by_its_ip_is_tied_to_the_agents_node_that_reports_that_address(db):
    node("walker-box").__class__.objects.filter(name="walker-box").update(addresses=["10.0.0.5", "fd00::5"])
    node("gpu-w1")
    labelled = node("old-box")
    labelled.labels = {"address": "10.0.0.7"}
    labelled.save(update_fields=["labels"])

    tied = remote.tie([ray_node("10.0.0.5", "10.0.0.5"), ray_node("gpu-w1", "10.0.0.6"), ray_node("10.0.0.7", "10.0.0.7"),
                       ray_node("10.0.0.8", "10.0.0.8")])

    assert [n.yardstick_node for n in tied] == ["walker-box", "gpu-w1", "old-box", None]


def test_a_cpu_job_on_a_measured_ray_node_holds_its_host_device_and_is_charged_for_it(admin_user, ray_says, client):
    box = node("walker-box")
    type(box).objects.filter(pk=box.pk).update(addresses=["10.0.0.5"])
    cpu = device(box, 0, model="AMD EPYC 9654", source="host", uuid="host-walker-box")
    prices()
    begun = floor_minute(datetime.now(UTC)) - timedelta(minutes=5)
    job = running_on(admin_user)

    ray_says["state"] = on_driver_node("RUNNING", "10.0.0.5", begun)
    remote.follow(job.pk)

    launch = Launch.objects.get(pk=job.pk)
    assert launch.allocation["yardstick_nodes"] == ["walker-box"] and launch.allocation["hosts"] == ["10.0.0.5"]
    [stint] = Stint.objects.filter(job=job)
    assert (stint.node, stint.device, stint.started_at, stint.ended_at) == ("walker-box", "cpu", begun, None)
    remote.follow(job.pk)
    assert Stint.objects.filter(job=job).count() == 1, "a second pass holds nothing more"

    ray_says["state"] = on_driver_node("SUCCEEDED", "10.0.0.5", begun, begun + timedelta(minutes=3))
    remote.follow(job.pk)
    assert Job.objects.get(pk=job.pk).status == Status.COMPLETED
    stint.refresh_from_db()
    assert stint.ended_at == begun + timedelta(minutes=3), "held until Ray says it ended"

    minutes(cpu, begun, 5, power_w=100.0)
    attribute(now=begun + timedelta(minutes=6))
    money = job_money(Job.objects.get(pk=job.pk))
    assert money["state"] != "not measured" and float(money["cost_usd"]) > 0, money
    client.force_login(admin_user)
    assert client.get(f"/api/jobs/{job.pk}").json()["money"]["cost_usd"] == money["cost_usd"]


def test_a_job_on_a_ray_node_no_agent_measures_costs_not_measured_never_zero(admin_user, ray_says, client):
    node("walker-box")  # an agent elsewhere: not the node the job runs on
    job = running_on(admin_user)
    ray_says["state"] = on_driver_node("RUNNING", "10.0.0.6", datetime.now(UTC) - timedelta(minutes=1))

    remote.follow(job.pk)

    assert Launch.objects.get(pk=job.pk).allocation["yardstick_nodes"] == [None]
    assert not Stint.objects.filter(job=job).exists(), "nothing to charge there"
    why = ("no Yardstick agent reports from ray node 10.0.0.6, where it runs: start one there (manage.py collect, or up "
           "--role collector) to measure what its jobs cost")
    client.force_login(admin_user)
    money = client.get(f"/api/jobs/{job.pk}").json()["money"]
    assert (money["cost_usd"], money["state"], money["cost_display"], money["cost_title"]) == (
        None, "not measured", "not measured", why)
    page = client.get(f"/jobs/{job.pk}").content.decode()
    assert f'id="job-cost"><span title="{why}">not measured</span></div>' in page and "$0.00" not in page
    listing = client.get("/jobs/", follow=True).content.decode()
    assert f'<td class="num job-cost"><span title="{why}">not measured</span></td>' in listing


def test_a_job_measured_only_in_part_shows_what_was_measured_and_says_so(admin_user, ray_says):
    box = node("walker-box")
    cpu = device(box, 0, model="AMD EPYC 9654", source="host", uuid="host-walker-box")
    prices()
    begun = floor_minute(datetime.now(UTC)) - timedelta(minutes=5)
    job = running_on(admin_user)
    Stint.objects.create(job=job, node="walker-box", device="cpu", pid=42, started_at=begun)  # a worker it started here
    ray_says["state"] = on_driver_node("RUNNING", "10.0.0.6", begun)
    remote.follow(job.pk)
    minutes(cpu, begun, 3, power_w=100.0)
    attribute(now=begun + timedelta(minutes=4))

    money = job_money(Job.objects.get(pk=job.pk))

    assert float(money["cost_usd"]) > 0 and money["state"] != "not measured"
    assert money["cost_title"].endswith("only what was measured: no Yardstick agent reports from ray node 10.0.0.6, "
                                        "where it runs: start one there (manage.py collect, or up --role collector) "
                                        "to measure what its jobs cost")

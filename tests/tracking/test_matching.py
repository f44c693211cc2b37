"""Matching outside runs to the devices their processes hold: holders (as the agent writes them) become stints."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from collector.agent.batch import Batch, DeviceInfo, Holder
from collector.agent.writer import Writer
from costs.attribution import attribute
from costs.models import Allocation
from tracking import store
from tracking.matching import HOLDER_GONE_S, match_runs
from trainer.models import Stint

NOW = timezone.now().replace(microsecond=0)
T0 = NOW - timedelta(minutes=20)
GPU0 = DeviceInfo("GPU-node-a-0", "node-a", 0, "NVIDIA H100 80GB HBM3", "nvml")
GPU1 = DeviceInfo("GPU-node-a-1", "node-a", 1, "NVIDIA H100 80GB HBM3", "nvml")
GPU_B = DeviceInfo("GPU-node-b-0", "node-b", 0, "NVIDIA H100 80GB HBM3", "nvml")
CPU_A = DeviceInfo("CPU-node-a", "node-a", 0, "AMD EPYC", "host", power_estimated=True)


@pytest.fixture
def seen(db):
    """seen(device, at, holder[, until]): the node agent's writer records `holder` on `device` at `at`
    (and every minute until `until`: a holding unseen for 5 minutes is a new one)."""
    with connection.cursor() as cur:
        cur.execute("SELECT 1")  # begin, so the writer's transactions nest in the test's
    writer = Writer(connection.connection)

    def record(device, at, holder, until=None):
        ticks = [at]
        while until is not None and ticks[-1] < until:
            ticks.append(min(until, ticks[-1] + timedelta(minutes=1)))
        writer.write(Batch([device], [], holders=[(device.uuid, ts, holder) for ts in ticks]))

    return record


def start_run(tags, start=T0):
    return store.create_run("0", start_time=int(start.timestamp() * 1000),
                            tags=[{"key": k, "value": v} for k, v in tags.items()])


def stints(run):
    return list(Stint.objects.filter(job=run.job).order_by("device", "started_at")
                .values_list("node", "device", "pid", "started_at", "ended_at"))


def test_the_runs_process_and_those_it_started_on_its_host_become_its_stints(seen):
    run = start_run({"yardstick.host": "node-a", "yardstick.pid": "500"})
    seen(GPU0, T0 + timedelta(seconds=5), Holder("pid:501", 501, 1000, ancestors=(500, 400)), NOW)  # a rank
    seen(GPU1, T0 + timedelta(seconds=9), Holder("pid:620", 620, 1000, ancestors=(610, 500, 400)), NOW)  # a worker's child
    seen(CPU_A, T0 + timedelta(seconds=2), Holder("pid:500", 500, 300, ancestors=(400,)), NOW)  # the run's own process
    seen(GPU_B, NOW, Holder("pid:501", 501, 1000, ancestors=(500,)))  # same PIDs, another host
    seen(GPU0, NOW, Holder("pid:777", 777, 1000, ancestors=(400,)))  # a sibling, not started by the run

    match_runs(now=NOW)

    assert stints(run) == [
        ("node-a", "GPU-node-a-0", 501, T0 + timedelta(seconds=5), None),
        ("node-a", "GPU-node-a-1", 620, T0 + timedelta(seconds=9), None),
        ("node-a", "cpu", 500, T0 + timedelta(seconds=2), None),
    ]


def test_an_older_process_that_had_the_runs_pid_is_not_the_run(seen):
    run = start_run({"yardstick.host": "node-a", "yardstick.pid": "500"})
    seen(GPU0, T0 - timedelta(hours=2), Holder("pid:500", 500, 1000))
    seen(GPU0, T0 - timedelta(hours=1), Holder("pid:500", 500, 1000))

    match_runs(now=NOW)

    assert stints(run) == []


def test_holders_on_other_nodes_with_the_runs_launcher_id_become_its_stints_too(seen):
    run = start_run({"yardstick.host": "node-a", "yardstick.pid": "500", "yardstick.slurm_job_id": "4242"})
    seen(GPU_B, T0 + timedelta(seconds=30), Holder("pid:9", 9, 1000, launcher_ids={"SLURM_JOB_ID": "4242"}), NOW)
    seen(GPU0, NOW, Holder("pid:10", 10, 1000, launcher_ids={"SLURM_JOB_ID": "4243"}))  # another Slurm job

    match_runs(now=NOW)

    assert stints(run) == [("node-b", "GPU-node-b-0", 9, T0 + timedelta(seconds=30), None)]


def test_a_run_without_the_package_tags_is_matched_to_nothing(seen):
    run = start_run({})
    seen(GPU0, NOW, Holder("pid:500", 500, 1000))

    assert match_runs(now=NOW)["created"] == 0
    assert stints(run) == []


def test_matching_again_changes_nothing(seen):
    run = start_run({"yardstick.host": "node-a", "yardstick.pid": "500"})
    seen(GPU0, T0, Holder("pid:500", 500, 1000), NOW)
    match_runs(now=NOW)
    first = stints(run)

    again = match_runs(now=NOW + timedelta(seconds=30))

    assert (again["created"], again["ended"]) == (0, 0)
    assert stints(run) == first and len(first) == 1


def test_a_stint_ends_at_the_holders_last_sighting_once_it_is_gone_and_a_new_one_starts_if_it_returns(seen):
    run = start_run({"yardstick.host": "node-a", "yardstick.pid": "500"})
    last = T0 + timedelta(minutes=5)
    seen(GPU0, T0, Holder("pid:500", 500, 1000), last)
    match_runs(now=last)
    assert stints(run) == [("node-a", "GPU-node-a-0", 500, T0, None)]

    match_runs(now=last + timedelta(seconds=HOLDER_GONE_S + 1))
    assert stints(run) == [("node-a", "GPU-node-a-0", 500, T0, last)]

    back = last + timedelta(minutes=2)  # within the agent's gap: the same holding goes on
    seen(GPU0, back, Holder("pid:500", 500, 1000))
    match_runs(now=back)
    assert stints(run) == [("node-a", "GPU-node-a-0", 500, T0, last), ("node-a", "GPU-node-a-0", 500, last, None)]


def test_when_the_run_ends_its_open_stints_end_with_it(seen):
    run = start_run({"yardstick.host": "node-a", "yardstick.pid": "500"})
    seen(GPU0, T0, Holder("pid:500", 500, 1000), NOW)
    match_runs(now=NOW)
    end = NOW + timedelta(seconds=10)
    store.update_run(run.run_id, status="FINISHED", end_time=int(end.timestamp() * 1000))
    seen(GPU0, end, Holder("pid:500", 500, 1000))  # still tearing down

    match_runs(now=end + timedelta(seconds=5))

    assert stints(run) == [("node-a", "GPU-node-a-0", 500, T0, end)]
    assert Stint.objects.get(job=run.job).end_reason == "run completed"


def test_the_cost_engine_charges_a_matched_run_its_devices_time(seen):
    from collector.models import Device, Rollup1m

    start = NOW.replace(second=0) - timedelta(minutes=10)
    run = start_run({"yardstick.host": "node-a", "yardstick.pid": "500"}, start=start)
    seen(GPU0, start, Holder("pid:500", 500, 1000), start + timedelta(minutes=3))
    gpu = Device.objects.get(uuid=GPU0.uuid)
    Rollup1m.objects.bulk_create([
        Rollup1m(device=gpu, bucket=start + timedelta(minutes=i), samples=60, covered_s=60.0, energy_j=6000.0,
                 energy_from="counter", power_mean_w=100.0) for i in range(5)])

    match_runs(now=start + timedelta(minutes=3))  # held: a stint opens
    match_runs(now=start + timedelta(minutes=5))  # gone: it ends at the last sighting
    attribute(now=start + timedelta(minutes=6))

    charged = Allocation.objects.filter(job=run.job).aggregate(s=Sum("device_s"), j=Sum("energy_j"))
    assert (charged["s"], charged["j"]) == (180, 18000)


def test_a_launched_jobs_processes_on_other_nodes_are_charged_to_it_and_its_own_node_left_to_its_worker(
        seen, admin_user, operator):
    from launch.kind import match_other_nodes, start
    from launch.models import Recipe
    from trainer.models import Worker

    Worker.report("launch@node-a", "node-a", ["launch@node-a"], ["cpu"], cores=8,
                  gpus=[{"index": 0, "uuid": GPU0.uuid, "name": GPU0.model, "memory_mib": 81920}])
    Recipe.define("spread", {"argv": ["torchrun", "train.py"], "devices": {"kind": "cuda", "count": 1}}, admin_user)
    job = start(recipe="spread", team="research", created_by=operator)
    own = Stint.objects.create(job=job, node="node-a", device=GPU0.uuid, pid=900, started_at=T0)  # the worker's
    type(job).objects.filter(pk=job.pk).update(status="running")
    type(job.run).objects.filter(pk=job.run.pk).update(start_time=int(T0.timestamp() * 1000))
    mine = {"YARDSTICK_JOB_ID": str(job.pk)}
    seen(GPU_B, T0 + timedelta(seconds=30), Holder("pid:42", 42, 1000, launcher_ids=mine), NOW)  # another node
    seen(GPU1, T0 + timedelta(seconds=30), Holder("pid:43", 43, 1000, launcher_ids=mine), NOW)  # the worker's node

    assert match_other_nodes(now=NOW)["created"] == 1

    assert [(s.node, s.device, s.ended_at) for s in Stint.objects.filter(job=job).exclude(pk=own.pk)] == [
        ("node-b", GPU_B.uuid, None)]
    own.refresh_from_db()
    assert own.ended_at is None, "the worker's own stint is the worker's to end"

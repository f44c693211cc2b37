"""A Slurm job's allocation beside what the agents measured (dashboard.launched.allocation_view, the job page's
launch card): GPUs allocated but never used are money too. Devices registered and charged as the collector and the
attribution task do (builders), the allocation as the Slurm executor records it (launch/on_slurm.py)."""

from datetime import UTC, datetime, timedelta

from dashboard.launched import allocation_view
from launch.models import Launch
from tests.dashboard.builders import attribute, device, floor_minute, job, minutes, node, prices, stint
from trainer.models import Job


def _slurm_job(start, end, hosts=("gpu01",), gpus=2):
    run = job(name="on slurm", status="completed")
    Job.objects.filter(pk=run.pk).update(source="launched")
    Launch.objects.create(
        job=run, recipe_name="grpo", recipe_version=1, executor="slurm",
        definition={"argv": ["train"], "params": [], "devices": {"kind": "cuda", "count": gpus},
                    "stop_grace_s": [60, 30], "executor": "slurm"},
        allocation={"nodes": ",".join(hosts), "hosts": list(hosts), "node_count": len(hosts), "gpus": gpus, "cpus": 16,
                    "start": start.isoformat(), "end": end.isoformat(), "time_limit": "01:00:00"})
    return Job.objects.get(pk=run.pk)


def test_gpus_allocated_and_not_used_are_allocated_idle_at_the_price_of_those_used(db, client, admin_user):
    start = floor_minute(datetime.now(UTC)) - timedelta(minutes=30)
    prices(per_hour="3.60", per_kwh="0", pue="1")
    box = node("gpu01")
    used, unused = device(box, 0), device(box, 1)
    minutes(used, start, 10)
    minutes(unused, start, 10)
    run = _slurm_job(start, start + timedelta(minutes=10))
    stint(run, used, start, start + timedelta(minutes=10))  # the agents saw its process on GPU 0 only
    attribute(datetime.now(UTC))
    view = allocation_view(run, run.launch)
    # 2 GPUs x 600 s = 1,200 GPU-s allocated; 600 measured on GPU 0; 600 idle x $3.60/h = $0.60.
    assert (view["allocated_gpu_s"], view["measured_gpu_s"], view["idle_gpu_s"]) == (1200, 600, 600)
    assert view["idle_usd"] == "0.60" and view["idle_pct"] == "50" and view["elsewhere_gpu_s"] == 0
    assert view["priced_by"] == "the GPUs it used there"
    client.force_login(admin_user)
    html = client.get(f"/jobs/{run.pk}").content.decode()
    assert '<span id="allocated-gpu-s">1200</span> GPU-s allocated' in html
    assert '<span id="measured-gpu-s">600</span> GPU-s' in html
    assert "allocated idle: 600 GPU-s\n      (50 % of it)" in html
    assert 'data-exact="0.60"\n      >$0.60</span>' in html and "estimate, at\n      the GPUs it used there" in html


def test_an_allocation_nobody_measured_is_idle_at_its_nodes_gpu_price_and_a_pending_job_has_none(db, client,
                                                                                                  admin_user):
    start = floor_minute(datetime.now(UTC)) - timedelta(minutes=30)
    prices(per_hour="7.20", per_kwh="0", pue="1")
    device(node("gpu02"), 0, model="NVIDIA B200")
    run = _slurm_job(start, start + timedelta(seconds=90), hosts=("gpu02",), gpus=1)
    view = allocation_view(run, run.launch)
    assert (view["allocated_gpu_s"], view["measured_gpu_s"], view["idle_gpu_s"]) == (90, 0, 90)
    assert view["idle_usd"] == "0.18" and view["priced_by"] == "the NVIDIA B200 price"  # 90 s x $7.20/h
    unpriced = _slurm_job(start, start + timedelta(seconds=90), hosts=("nobody-knows",), gpus=1)
    assert allocation_view(unpriced, unpriced.launch)["idle_usd"] is None
    client.force_login(admin_user)
    assert "no price: no GPU of its nodes is priced" in client.get(f"/jobs/{unpriced.pk}").content.decode()
    Launch.objects.filter(pk=run.pk).update(allocation=None)
    run.launch.refresh_from_db()
    assert allocation_view(run, run.launch) is None

"""A job on two devices (devices=2, two CPU ranks under gloo) through trainer.runner.run.

This process is rank 0, as a Celery pool process is; rank 1 is the subprocess the runner starts.
"""

import os
import signal

import psutil
import pytest
import torch
from django.conf import settings
from django.core.management import CommandError, call_command

from tests.rl.ranks import run_ranks, train
from tests.trainer.helpers import TINY
from trainer import runner
from trainer.models import Job, Step, Stint, Worker

CONFIG = {**TINY, "steps": 4, "seed": 3}


@pytest.fixture
def two_core_worker(db):
    """This node's jobs worker, as it reports itself: with the cores a job on two CPUs needs."""
    cores = len(os.sched_getaffinity(0))
    name = f"jobs@{settings.YARDSTICK_NODE}"
    return Worker.report(name, settings.YARDSTICK_NODE, ["jobs", name], ["cpu"], cores=max(cores, 2))


def start(devices=2, **config):
    return Job.start(name="ddp", team="research", env="arithmetic", config={**CONFIG, **config}, device="cpu",
                     devices=devices, enqueue=False)


def uninterrupted(models_dir, steps):
    """The policy and each step's metrics of a 2-rank run of CONFIG that nothing interrupts."""
    return run_ranks(2, train, CONFIG, models_dir, steps)[0]


def comparable(metrics):
    return {k: v for k, v in metrics.items() if k.startswith("train/") or k == "performance/gen_tokens"}


def test_a_job_on_two_devices_stops_and_resumes_exactly_where_an_uninterrupted_run_goes(two_core_worker, data_dir):
    def stop_at_2(job, step, metrics):
        if step == 2:
            job.request_stop(by="test")

    job = runner.run(start().pk, progress=stop_at_2)

    assert job.status == "stopped", job.error
    assert job.steps_done == 2 and job.checkpoint_step == 2
    first = list(Stint.objects.filter(job=job).order_by("id"))
    assert [s.pid == os.getpid() for s in first] == [True, False]  # rank 0 here, rank 1 its own process
    assert all((s.device, s.end_reason, s.first_step, s.last_step) == ("cpu", "stopped", 0, 2) for s in first)
    assert not psutil.pid_exists(first[1].pid), "rank 1 ended with the job"

    assert job.resume() is True
    job = runner.run(job.pk)

    assert job.status == "completed", job.error
    stints = list(Stint.objects.filter(job=job).order_by("id"))
    assert len(stints) == 4 and not psutil.pid_exists(stints[3].pid)
    assert all((s.end_reason, s.first_step, s.last_step) == ("completed", 2, 4) for s in stints[2:])
    expected = uninterrupted(data_dir / "models", steps=4)
    final = torch.load(runner.checkpoint_path(job, 4), map_location="cpu", weights_only=True)
    assert final["world_size"] == 2 and len(final["rng_ranks"]) == 2
    for name, weights in expected["model"].items():
        assert torch.equal(final["model"][name], weights), name  # bit for bit, across the stop
    recorded = {row.step: comparable(row.metrics) for row in Step.objects.filter(job=job, step__gt=0)}
    assert recorded == {n + 1: comparable(m) for n, m in enumerate(expected["metrics"])}


def test_a_rank_that_dies_fails_the_job_naming_it_and_leaves_no_process(two_core_worker, data_dir):
    def kill_rank_1(job, step, metrics):
        if step == 1:
            os.kill(Stint.objects.filter(job=job).exclude(pid=os.getpid()).get().pid, signal.SIGKILL)

    job = runner.run(start(steps=50).pk, progress=kill_rank_1)

    assert job.status == "failed"
    assert "RankFailed: rank 1 of 2" in job.error and "was killed by SIGKILL at step 1" in job.error
    stints = list(Stint.objects.filter(job=job))
    assert len(stints) == 2 and all(s.end_reason == "failed" and s.last_step == 1 for s in stints)
    assert not any(psutil.pid_exists(s.pid) for s in stints if s.pid != os.getpid())
    assert job.can_resume  # the checkpoint is there; the node still has the cores


def test_a_job_asking_for_more_cpus_than_the_node_has_fails_at_once_without_a_resume(two_core_worker, data_dir):
    cores = len(os.sched_getaffinity(0))
    Worker.objects.filter(pk=two_core_worker.pk).update(cores=cores + 1)  # it reported more than it has now

    job = runner.run(start(devices=cores + 1).pk)

    assert job.status == "failed"
    assert f"DeviceUnavailable: {cores + 1} × cpu was requested but" in job.error
    assert f"use devices 1..{cores}" in job.error
    assert not Stint.objects.filter(job=job).exists()
    assert not job.can_resume and "is more than the worker that ran it has" in job.not_resumable_reason


def test_train_refuses_a_device_count_it_cannot_use_naming_the_flag(db, data_dir):
    with pytest.raises(CommandError, match=r"^--devices: devices must be a whole number from 1 to \d+, got 0$"):
        call_command("train", "--devices", "0", "--steps", "1")
    assert not Job.objects.exists()

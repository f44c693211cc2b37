"""Jobs workers report their devices; a job asking for a device none of them has is refused at start."""

import json
import os
import signal
import socket
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.trainer.helpers import TINY, worker_process
from tests.waiting import wait_for
from trainer.models import Job, Worker
from trainer.workers import local_devices


def post_job(client, device):
    return client.post("/api/jobs", json.dumps({"name": "gpu run", "team": "research", "env": "arithmetic",
                                                 "config": {**TINY, "steps": 2}, "device": device}),
                       content_type="application/json")


def test_a_device_no_jobs_worker_has_is_refused_naming_what_the_workers_have(db, client, operator):
    Worker.report("jobs@host-a", "host-a", ["jobs"], ["cpu"])
    Worker.report("jobs@host-b", "host-b", ["jobs"], ["cpu", "cuda:0"])
    client.force_login(operator)

    resp = post_job(client, "cuda:1")
    assert resp.status_code == 400
    assert resp.json() == {"field": "device", "error": "device cuda:1 is not on any jobs worker: workers have "
                                                       "cpu (host-a); cpu, cuda:0 (host-b); use auto or one of those"}
    assert Job.objects.count() == 0
    assert post_job(client, "cuda").status_code == 201, "host-b has a GPU"
    assert post_job(client, "cuda:0").status_code == 201


def test_a_cpu_only_fleet_refuses_cuda_in_the_words_of_the_issue(db, client, operator):
    Worker.report("jobs@host-a", "host-a", ["jobs"], ["cpu"])
    client.force_login(operator)
    resp = post_job(client, "cuda")
    assert resp.json()["error"].startswith("device cuda is not on any jobs worker: workers have cpu (host-a)")
    assert post_job(client, "auto").status_code == 201 and post_job(client, "cpu").status_code == 201


def test_with_no_live_jobs_worker_reported_a_gpu_job_is_accepted_and_waits_in_the_queue(db, client, operator):
    long_gone = timezone.now() - timedelta(seconds=Worker.STALE_S + 1)
    Worker.objects.create(name="jobs@old", host="old", queues=["jobs"], devices=["cpu"], seen_at=long_gone)
    Worker.report("default@host-a", "host-a", ["default"], ["cpu"])  # not a jobs worker
    client.force_login(operator)
    resp = post_job(client, "cuda")
    assert resp.status_code == 201 and resp.json()["status"] == "queued"


def test_manage_py_train_checks_the_device_against_what_torch_sees_here(db, data_dir):
    Worker.report("jobs@gpu-host", "gpu-host", ["jobs"], ["cpu", "cuda:0"])  # the workers do not run it
    with pytest.raises(CommandError) as caught:
        call_command("train", "--device", "cuda:99", "--steps", "1")
    assert str(caught.value) == (f"--device: device cuda:99 is not on this machine: torch sees "
                                 f"{', '.join(local_devices())} ({socket.gethostname()}); use auto or one of those")
    assert Job.objects.count() == 0


def test_a_celery_worker_reports_its_queues_and_devices_when_ready_and_is_forgotten_when_it_stops(
    transactional_db, child_env, tmp_path
):
    name = f"controls-test-{os.getpid()}@{socket.gethostname()}"
    with worker_process(child_env, tmp_path / "worker.log", name, "--pool", "solo") as worker:
        row = wait_for(lambda: Worker.objects.filter(name=name).first(), timeout_s=90,
                       what=f"the worker to report itself (log: {tmp_path / 'worker.log'})")
        assert (row.host, row.queues, row.devices) == (socket.gethostname(), ["jobs"], local_devices())
        assert list(Worker.live("jobs")) == [row]
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    assert not Worker.objects.filter(name=name).exists(), "a stopped worker no longer counts"

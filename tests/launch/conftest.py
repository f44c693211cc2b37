"""Fixtures of the launch tests: a real launch worker (Celery, threads pool, the real Redis broker) on this node,
with the fake pynvml's GPUs as its devices (no machine here has an NVIDIA GPU), and recipes an admin defined; for a
launch on a cluster, the follower's passes in a thread and the helpers its tests share."""

import contextlib
import sys
import threading

import pytest
from celery.contrib.testing.worker import start_worker

from launch.models import OutputLine
from tests.collector.fake_pynvml import FakeGpu, FakeNvml
from tests.waiting import wait_for
from trainer.models import Job

GPUS = ("GPU-11111111-aaaa-4000-8000-000000000001", "GPU-11111111-aaaa-4000-8000-000000000002")


def purge(queue):
    from yardstick.celery import app

    with app.connection_for_write() as conn:
        try:
            conn.default_channel.queue_purge(queue)
        except Exception:  # noqa: BLE001 - the queue does not exist yet
            pass


@pytest.fixture
def launch_data_dir(settings, tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    settings.DATA_DIR = path
    return path


@pytest.fixture
def launch_worker(transactional_db, live_server, settings, monkeypatch, launch_data_dir):
    """This node's launch worker, in threads of this process, reporting two fake-NVML H100s."""
    settings.YARDSTICK_URL = live_server.url
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([FakeGpu(GPUS[0]), FakeGpu(GPUS[1])]))
    name = f"launch@{settings.YARDSTICK_NODE}"
    purge(name)
    with running_launch_worker(name) as worker:
        yield worker
        purge(name)
        _end_runs_left()
    purge(name)


@contextlib.contextmanager
def running_launch_worker(name):
    """A launch worker `name` in threads of this process, once it has reported what it has (the GPUs of whatever
    pynvml is then); stopped on the way out, as a worker shuts down (its row forgotten)."""
    from trainer.models import Worker
    from trainer.workers import report
    from yardstick.celery import app

    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, queues=[name], hostname=name,
                      shutdown_timeout=60, loglevel="WARNING") as worker:
        report(name, [name])
        wait_for(lambda: Worker.objects.filter(name=name).exclude(gpus=[]).exists(), what="the launch worker's report")
        yield worker


def _end_runs_left():
    """Kill what a test left running (a loop's next run, a sleeper) and wait for its thread to end the job, so no
    run outlives its test and writes into the next one's database."""
    import os
    import signal

    from launch.models import Launch
    from trainer.models import ACTIVE, Job

    for pid in Launch.objects.filter(job__status__in=ACTIVE, pid__isnull=False).values_list("pid", flat=True):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    Job.objects.filter(status="queued", source="launched").update(status="stopped")
    wait_for(lambda: not Job.objects.filter(status__in=ACTIVE, source="launched").exists(), timeout_s=30,
             what="the runs a test left to end")


@pytest.fixture
def recipe(db, admin_user):
    """define(name, **fields): an admin's recipe (a cpu script of this Python unless told otherwise)."""
    from launch.models import Recipe

    def define(name, argv, **fields):
        fields.setdefault("devices", {"kind": "cpu", "count": 1})
        return Recipe.define(name, {"argv": argv, **fields}, admin_user)[0]

    return define


# -- a launch on a cluster (tests/launch/test_ray.py, test_slurm.py) ----------------------------------------


@pytest.fixture
def follower(transactional_db):
    """The follower's pass (launch.tasks.follow_clusters) every 0.3 s in a thread, as beat runs it; `stop()` ends
    it (the control plane going down), `start()` brings a fresh one up."""
    from django.db import connection

    from launch import remote

    class Follower:
        def __init__(self):
            self.thread = None

        def start(self):
            self.stopping = threading.Event()

            def loop(stopping):
                try:
                    while not stopping.is_set():
                        remote.follow_all()
                        stopping.wait(0.3)
                finally:
                    connection.close()

            self.thread = threading.Thread(target=loop, args=(self.stopping,), daemon=True)
            self.thread.start()
            return self

        def stop(self):
            if self.thread is not None:
                self.stopping.set()
                self.thread.join(30)
                self.thread = None

    running = Follower().start()
    yield running
    running.stop()


@pytest.fixture
def reporting(settings, live_server, launch_data_dir):
    settings.YARDSTICK_URL = live_server.url
    return live_server


def cluster_recipe(recipe, tmp_path, executor, cluster):
    """define(name, argv, **fields): an admin's recipe that runs on `cluster` (of `executor`'s kind), its jobs'
    output directories under a shared_dir of the test's own, stop graces of 2 and 3 s unless told otherwise."""
    shared = tmp_path / "shared"
    shared.mkdir()

    def define(name, argv, **fields):
        fields.setdefault("stop_grace_s", [2, 3])
        return recipe(name, argv, executor=executor, cluster=cluster, shared_dir=str(shared), **fields)

    return define


def launch(recipe, admin_user, **fields):
    from launch.kind import start

    fields.setdefault("team", "research")
    return start(recipe=recipe, created_by=admin_user, **fields)


def job_of(job):
    return Job.objects.select_related("launch").get(pk=job.pk)


def output(job):
    return "\n".join(OutputLine.objects.filter(job=job).values_list("text", flat=True))

"""The line outlives every process: jobs wait in it while the node's launch worker and the control plane are down,
and when a new worker comes up (a real Celery worker, the fake NVML's two GPUs) they start in the line's order,
each as soon as a GPU frees, by the pass that runs where a job ends; a job placed on a worker that restarted before
running it is sent to the new process."""

import sys
from types import SimpleNamespace

import pytest
from django.utils import timezone

from launch.kind import requeue_orphans
from tests.collector.fake_pynvml import FakeGpu, FakeNvml
from tests.launch.conftest import GPUS, job_of, launch, purge, running_launch_worker
from tests.waiting import wait_for
from trainer.models import Job, Status, Worker

PY = sys.executable
pytestmark = pytest.mark.slow

# Holds its GPU until its output directory holds "finish".
HOLD = ("import os, sys, time\nwhile not os.path.exists(os.path.join(sys.argv[1], 'finish')): time.sleep(0.05)")


def test_waiting_jobs_outlive_the_worker_and_the_control_plane_and_start_in_the_lines_order(
        transactional_db, live_server, settings, monkeypatch, launch_data_dir, recipe, operator, admin_user, request):
    from trainer.tasks import forget_this_worker, report_this_worker
    from trainer.workers import report

    settings.YARDSTICK_URL = live_server.url
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([FakeGpu(GPUS[0]), FakeGpu(GPUS[1])]))
    name = f"launch@{settings.YARDSTICK_NODE}"
    purge(name)
    recipe("hold", [PY, "-c", HOLD, "{job_dir}"], devices={"kind": "cuda", "count": 1}, stop_grace_s=[1, 2])

    def finish(job):
        folder = settings.DATA_DIR / "launched" / f"job-{job.pk}"
        wait_for(folder.is_dir, what=f"job {job.pk}'s output directory")
        (folder / "finish").write_text("")

    def running():
        return set(Job.objects.filter(status=Status.RUNNING).values_list("pk", flat=True))

    # Before: the worker had reported its two GPUs; two runs were given them, three more wait.
    report(name, [name])
    first, second = launch("hold", operator), launch("hold", operator)
    normal, low = launch("hold", operator), launch("hold", operator, priority="low")
    high = launch("hold", admin_user, priority="high")
    assert list(Job.objects.filter(placed_at__isnull=True).order_by("line_place").values_list("pk", flat=True)) == [
        high.pk, normal.pk, low.pk]
    # Down: the worker is gone (its row with it), and no process holds anything of the line.
    Worker.objects.filter(name=name).delete()

    with running_launch_worker(name) as worker:
        report_this_worker(sender=worker)  # what a started worker's worker_ready does: report, then a pass
        # Its reporting thread ends with this test (a worker's shutdown signal does it; the test worker sends none).
        request.addfinalizer(lambda: forget_this_worker(sender=SimpleNamespace(hostname=worker.hostname)))
        wait_for(lambda: running() == {first.pk, second.pk}, what="the two placed before to run")
        started = []
        for ending, expected in ((first, high), (second, normal), (high, low)):
            finish(ending)
            wait_for(lambda e=expected: e.pk in running(), what=f"job {expected.pk} to start")
            started.append(expected.pk)
        assert started == [high.pk, normal.pk, low.pk]
        assert list(Job.objects.filter(pk__in=started).order_by("started_at").values_list("pk", flat=True)) == started
        for job in (normal, low):
            finish(job)
        wait_for(lambda: not running(), what="every run to end")
    purge(name)


def test_a_job_whose_message_left_with_a_restarted_worker_is_sent_again_and_keeps_its_gpu(
        transactional_db, live_server, settings, monkeypatch, launch_data_dir, recipe, operator, request):
    """Ctrl-C on `up` while a job was being placed: the launch worker, shutting down, took its message and never ran
    it (the broker holds it unacknowledged for an hour). The worker that starts under the same name does not hold
    it: the job is sent to it again with the GPU it was given, and runs; a job placed on the new process is not."""
    from trainer.tasks import forget_this_worker, report_this_worker
    from trainer.workers import report

    settings.YARDSTICK_URL = live_server.url
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([FakeGpu(GPUS[0]), FakeGpu(GPUS[1])]))
    name = f"launch@{settings.YARDSTICK_NODE}"
    purge(name)
    recipe("hold", [PY, "-c", HOLD, "{job_dir}"], devices={"kind": "cuda", "count": 1}, stop_grace_s=[1, 2])
    report(name, [name], started_at=timezone.now())  # the process that is going away
    stranded = launch("hold", operator)
    given = job_of(stranded).launch.gpus
    assert given and Job.objects.get(pk=stranded.pk).placed_at is not None
    purge(name)  # its message left with that process

    with running_launch_worker(name) as worker:
        report_this_worker(sender=worker)  # worker_ready: the new process reports, then sends it again
        request.addfinalizer(lambda: forget_this_worker(sender=SimpleNamespace(hostname=worker.hostname)))
        wait_for(lambda: Job.objects.get(pk=stranded.pk).status == Status.RUNNING,
                 what="the stranded job to run on the new process")
        assert job_of(stranded).launch.gpus == given
        later = launch("hold", operator)  # placed on the new process: nothing to send again
        wait_for(lambda: Job.objects.get(pk=later.pk).status == Status.RUNNING, what="the later job to run")
        assert requeue_orphans() == []
        for job in (stranded, later):
            folder = settings.DATA_DIR / "launched" / f"job-{job.pk}"
            # running (claimed) before its command has made its directory: under load, a moment before
            wait_for(folder.is_dir, what=f"job {job.pk}'s output directory")
            (folder / "finish").write_text("")
        wait_for(lambda: set(Job.objects.filter(pk__in=[stranded.pk, later.pk]).values_list("status", flat=True))
                 == {Status.COMPLETED}, what="both to complete")
        assert Job.objects.get(pk=stranded.pk).status_changes.filter(to_status=Status.RUNNING).count() == 1
    purge(name)

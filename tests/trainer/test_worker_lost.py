"""A jobs worker whose pool process dies mid-job fails the job at once, not at the heartbeat limit.

A real `celery worker` (prefork, as `up` runs it) on the real Redis broker runs a
job; the test SIGKILLs the pool process that runs it, as a segfault or the
kernel's OOM killer would, and leaves the worker's main process alive. Nothing
runs the heartbeat check here, so only the worker-lost path can fail the job.
"""

import os
import signal
import time

import pytest

from tests.trainer.helpers import purge_jobs_queue, worker_process
from tests.waiting import wait_for
from trainer.models import Job, StatusChange, Stint

# billiard reaps a dead pool process within a second and waits up to its
# lost_worker_timeout (10 s) before reporting WorkerLostError; the heartbeat check needs 120 s.
FAILED_WITHIN_S = 20


# SIGKILL: the OOM killer, a `kill -9`; SIGSEGV: a crash in native code (torch_threads 10^6 did it).
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
def test_it_fails_the_job_of_a_killed_pool_process_within_seconds_and_it_can_be_resumed(
    transactional_db, make_job, child_env, tmp_path, sig
):
    log_path = tmp_path / "worker.log"
    try:
        with worker_process(child_env, log_path, f"lost-test-{os.getpid()}@%h",
                            "--pool", "prefork", "--concurrency", "1") as worker:
            job = make_job(steps=5000, checkpoint_every=2, enqueue=True)
            wait_for(lambda: Job.objects.filter(pk=job.pk, checkpoint_step__gte=2, steps_done__gte=3).exists(),
                     timeout_s=120, what=f"the worker to pass a checkpoint (log: {log_path})")
            stint = Stint.objects.get(job=job)
            assert stint.pid != worker.pid, "the job runs in a pool process, not the worker's main process"

            os.kill(stint.pid, sig)
            killed_at = time.monotonic()
            job = wait_for(lambda: Job.objects.filter(pk=job.pk, status="failed").first(),
                           timeout_s=FAILED_WITHIN_S, every_s=0.05,
                           what=f"the job to show failed (log: {log_path})")
            seconds = time.monotonic() - killed_at
            print(f"job failed {seconds:.2f} s after its pool process got {sig.name}: {job.error}")
            assert worker.poll() is None, "the worker's main process lives on"
    finally:
        purge_jobs_queue()

    assert f"the worker on {stint.node} (pid {stint.pid}) was lost" in job.error
    assert f"Celery: Worker exited prematurely: signal {sig.value} ({sig.name});" in job.error, job.error
    assert f"resume to continue from the checkpoint at step {job.checkpoint_step}" in job.error
    assert StatusChange.objects.filter(job=job, from_status="running", to_status="failed").get().reason == job.error
    stint.refresh_from_db()
    assert stint.end_reason == "crashed" and stint.ended_at is not None
    assert job.can_resume, job.resume_refusal()


def test_a_job_whose_pool_process_died_before_claiming_it_fails_instead_of_staying_queued(transactional_db, make_job):
    """The message is acknowledged when the pool process dies, so nothing would run the job again."""
    from billiard.exceptions import WorkerLostError

    from trainer.tasks import fail_job_of_lost_worker

    job = make_job(steps=5)
    assert job.status == "queued"
    lost = WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL) Job: 0.")
    fail_job_of_lost_worker(args=[job.pk], exception=lost)  # what Celery's task_failure sends

    job.refresh_from_db()
    assert job.status == "failed"
    assert job.error == ("the worker was lost before it started the job: Celery: Worker exited prematurely: "
                         "signal 9 (SIGKILL); resume to start it")
    assert job.can_resume, job.resume_refusal()
    assert StatusChange.objects.filter(job=job, from_status="queued", to_status="failed").exists()


def test_a_lost_report_for_a_job_already_claimed_elsewhere_leaves_it_running(transactional_db, make_job):
    from billiard.exceptions import WorkerLostError

    from trainer.tasks import fail_job_of_lost_worker

    job = make_job(steps=5)
    assert job.claim(), "a worker claimed it"
    fail_job_of_lost_worker(args=[job.pk], exception=WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL)"))

    job.refresh_from_db()
    assert job.status == "running"

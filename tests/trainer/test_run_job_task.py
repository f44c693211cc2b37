"""trainer.tasks: jobs run on real Celery workers over the real Redis broker.

One worker runs in a thread of this process (celery.contrib.testing); the
crash test starts a real `celery worker` process and kills it with SIGKILL.
"""

import json
import os
import signal

import pytest
from celery.contrib.testing.worker import start_worker

from tests.trainer.helpers import TINY, purge_jobs_queue, worker_process
from tests.waiting import wait_for
from trainer import runner
from trainer.models import Job, StatusChange, Step, Stint
from trainer.tasks import detect_crashed_jobs
from yardstick.celery import app


@pytest.fixture
def jobs_worker(transactional_db, data_dir):
    """A Celery worker on the "jobs" queue, in a thread of this process."""
    purge_jobs_queue()
    with start_worker(app, pool="solo", concurrency=1, perform_ping_check=False, queues=["jobs"],
                      shutdown_timeout=30) as worker:
        yield worker
    purge_jobs_queue()


def history(job):
    return list(StatusChange.objects.filter(job=job).values_list("from_status", "to_status"))


def test_a_job_started_through_the_api_runs_on_a_worker_and_stops_within_one_step(jobs_worker, operator, client):
    client.force_login(operator)
    resp = client.post("/api/jobs", json.dumps({
        "name": "long", "team": "research", "env": "arithmetic", "config": {**TINY, "steps": 500},
    }), content_type="application/json")
    assert resp.status_code == 201
    job_id = resp.json()["id"]

    wait_for(lambda: Job.objects.get(pk=job_id).steps_done >= 2, what="two steps on the worker")
    resp = client.post(f"/api/jobs/{job_id}/stop")
    # The API answers at once: the worker has not stopped yet.
    assert resp.status_code == 200 and resp.json()["status"] == "stopping"
    steps_when_asked = Job.objects.get(pk=job_id).steps_done

    job = wait_for(lambda: Job.objects.filter(pk=job_id, status="stopped").first(), what="the job to stop")
    assert job.steps_done <= steps_when_asked + 1, "it stops within one step"
    assert job.checkpoint_step == job.steps_done
    assert runner.latest_checkpoint(job).name == f"step-{job.steps_done:06d}.pt"
    assert history(job) == [("", "queued"), ("queued", "running"), ("running", "stopping"), ("stopping", "stopped")]
    stint = Stint.objects.get(job=job)
    assert stint.pid == os.getpid() and stint.ended_at is not None and stint.end_reason == "stopped"
    assert job.heartbeat_at is not None


def test_a_resumed_job_is_enqueued_again_and_runs_on_the_worker(jobs_worker, make_job):
    job = make_job(steps=4)
    job.request_stop()  # cancelled while queued: it never ran
    assert job.resume() is True  # enqueued again after commit

    job = wait_for(lambda: Job.objects.filter(pk=job.pk, status="completed").first(), what="the job to complete")
    assert job.steps_done == 4
    assert list(Step.objects.filter(job=job).values_list("step", flat=True)) == [0, 1, 2, 3, 4]


def test_a_killed_worker_leaves_a_failed_job_that_resumes_from_its_checkpoint(
    transactional_db, make_job, child_env, tmp_path, settings
):
    try:
        with worker_process(child_env, tmp_path / "worker.log", f"crash-test-{os.getpid()}@%h",
                            "--pool", "solo") as worker:
            job = make_job(steps=5000, checkpoint_every=2, enqueue=True)
            wait_for(lambda: Job.objects.filter(pk=job.pk, checkpoint_step__gte=2, steps_done__gte=3).exists(),
                     timeout_s=120, what=f"the worker to pass a checkpoint (log: {tmp_path / 'worker.log'})")
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
    finally:
        purge_jobs_queue()

    job.refresh_from_db()
    assert job.status == "running", "nobody told the database: only the heartbeat can"
    assert Stint.objects.get(job=job).ended_at is None
    checkpoint_step = job.checkpoint_step
    # The newest file can be one checkpoint ahead of the row (killed between the two writes);
    # a resume starts from the file, and either is consistent with the step rows.
    resume_step = int(runner.latest_checkpoint(job).stem.removeprefix("step-"))
    assert resume_step >= checkpoint_step >= 2

    settings.YARDSTICK_JOB_HEARTBEAT_LIMIT_S = 1
    wait_for(lambda: detect_crashed_jobs() == 1, timeout_s=10, what="the crash detector to fail the job")

    job.refresh_from_db()
    assert job.status == "failed"
    assert "stopped answering" in job.error
    assert f"resume to continue from the checkpoint at step {checkpoint_step}" in job.error
    stint = Stint.objects.get(job=job)
    assert stint.ended_at is not None and stint.end_reason == "crashed"
    assert stint.ended_at <= job.heartbeat_at, "device time is charged up to the last sign of life"
    assert stint.pid == worker.pid
    assert detect_crashed_jobs() == 0

    # Resume (here, in this process) continues from the checkpoint, not from the start.
    assert job.resume() is True
    purge_jobs_queue()  # the run_job message resume() sent: this test runs it itself

    def stop_after_one(job, step, metrics):
        job.request_stop()

    job = runner.run(job.pk, progress=stop_after_one)
    assert job.status == "stopped", job.error
    assert job.steps_done == resume_step + 1
    second = Stint.objects.filter(job=job).order_by("-started_at").first()
    assert second.first_step == resume_step and second.end_reason == "stopped"
    # Rows the killed worker wrote past its checkpoint were replaced by the resumed run.
    assert list(Step.objects.filter(job=job).values_list("step", flat=True)) == list(range(resume_step + 2))


def test_a_worker_shutting_down_stops_its_job_at_a_checkpoint_instead_of_killing_it(
    transactional_db, make_job, child_env, tmp_path
):
    """What `up` does on Ctrl-C: SIGTERM to the worker's main process (a prefork pool, as in `up`)."""
    try:
        with worker_process(child_env, tmp_path / "worker.log", f"shutdown-test-{os.getpid()}@%h",
                            "--pool", "prefork", "--concurrency", "1") as worker:
            job = make_job(steps=5000, checkpoint_every=1000, enqueue=True)
            wait_for(lambda: Job.objects.filter(pk=job.pk, steps_done__gte=2).exists(),
                     timeout_s=120, what=f"the worker to run two steps (log: {tmp_path / 'worker.log'})")
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)
    finally:
        purge_jobs_queue()

    assert code == 0
    job.refresh_from_db()
    assert job.status == "stopped", (tmp_path / "worker.log").read_text()[-2000:]
    assert "worker shutting down" in StatusChange.objects.filter(job=job, to_status="stopping").get().reason
    stint = Stint.objects.get(job=job)
    assert stint.ended_at is not None and stint.end_reason == "stopped"
    assert job.checkpoint_step == job.steps_done >= 2, "the checkpoint is at the step it stopped"
    assert runner.latest_checkpoint(job) is not None

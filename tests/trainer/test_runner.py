"""trainer.runner.run: one job from queued to its end, in this process, with a tiny policy."""

import os

from tests.trainer.helpers import STEP_KEYS
from trainer import runner
from trainer.models import Job, Sample, StatusChange, Step, Stint, Worker


def history(job):
    return list(StatusChange.objects.filter(job=job).values_list("from_status", "to_status"))


def metrics_by_step(job, prefix=("train/", "eval/")):
    return {
        row.step: {k: v for k, v in row.metrics.items() if k.startswith(prefix)}
        for row in Step.objects.filter(job=job).order_by("step")
    }


def test_a_job_runs_to_completion_recording_every_step(make_job, settings):
    settings.YARDSTICK_NODE = "gpu-node-7"  # the node name its telemetry carries too
    job = make_job(steps=6)
    job = runner.run(job.pk)

    assert job.status == "completed", job.error
    assert job.steps_done == 6 and job.finished_at is not None
    assert history(job) == [("", "queued"), ("queued", "running"), ("running", "completed")]
    steps = {row.step: row for row in Step.objects.filter(job=job)}
    assert sorted(steps) == [0, 1, 2, 3, 4, 5, 6]
    # Step 0 is the baseline evaluation; eval/pass1 again every eval_every (2) steps and at the end.
    assert set(steps[0].metrics) == {"eval/pass1", "timing/eval_s"}
    assert [n for n, row in steps.items() if "eval/pass1" in row.metrics] == [0, 2, 4, 6]
    for n in range(1, 7):
        missing = set(STEP_KEYS) - set(steps[n].metrics)
        assert not missing, f"step {n} lacks {sorted(missing)}"
        assert steps[n].reward_mean == steps[n].metrics["train/reward_mean"]
        assert steps[n].gen_tokens == steps[n].metrics["performance/gen_tokens"] > 0
    assert job.baseline_pass1 == steps[0].eval_pass1
    assert job.latest_pass1 == steps[6].eval_pass1
    assert job.latest_reward_mean == steps[6].reward_mean
    # A few readable rollouts per step.
    assert Sample.objects.filter(job=job).count() == 6 * 2
    sample = Sample.objects.filter(job=job, step=3).first()
    assert sample.prompt and 0.0 <= sample.reward <= 1.0
    # Checkpoints every 2 steps, the newest 2 kept.
    assert [p.name for p in runner.checkpoints(job)] == ["step-000004.pt", "step-000006.pt"]
    assert job.checkpoint_step == 6
    # Where it ran, for the cost engine: one stint, ended.
    stint = Stint.objects.get(job=job)
    assert (stint.node, stint.device, stint.pid) == ("gpu-node-7", "cpu", os.getpid())
    assert stint.ended_at is not None and stint.end_reason == "completed"
    assert (stint.first_step, stint.last_step) == (0, 6)


def test_a_resumed_run_has_the_same_metrics_as_an_uninterrupted_one(make_job):
    straight = runner.run(make_job(steps=6, seed=3).pk)
    assert straight.status == "completed", straight.error

    def stop_at_3(job, step, metrics):
        if step == 3:
            job.request_stop(by="test")

    interrupted = runner.run(make_job(steps=6, seed=3).pk, progress=stop_at_3)
    assert interrupted.status == "stopped", interrupted.error
    assert interrupted.steps_done == 3
    assert runner.latest_checkpoint(interrupted).name == "step-000003.pt", "a stop writes a checkpoint"

    assert interrupted.resume() is True
    resumed = runner.run(interrupted.pk)
    assert resumed.status == "completed", resumed.error

    assert metrics_by_step(resumed) == metrics_by_step(straight)
    stints = list(Stint.objects.filter(job=resumed).order_by("started_at"))
    assert [(s.first_step, s.last_step, s.end_reason) for s in stints] == [(0, 3, "stopped"), (3, 6, "completed")]
    assert history(resumed)[-4:] == [("stopping", "stopped"), ("stopped", "queued"), ("queued", "running"),
                                     ("running", "completed")]


def test_a_stop_lands_within_one_step_with_a_checkpoint(make_job):
    def stop_at_1(job, step, metrics):
        if step == 1:
            job.request_stop()

    job = runner.run(make_job(steps=50).pk, progress=stop_at_1)
    assert job.status == "stopped" and job.steps_done == 1
    assert runner.latest_checkpoint(job).name == "step-000001.pt"
    assert Stint.objects.get(job=job).end_reason == "stopped"


def test_a_budget_stop_ends_the_job_at_the_next_step_with_a_checkpoint(make_job):
    def spend_it_all(job, step, metrics):
        if step == 1:
            Job.objects.get(pk=job.pk).request_budget_stop()

    job = runner.run(make_job(steps=50).pk, progress=spend_it_all)
    assert job.status == "budget_exhausted" and job.steps_done == 1
    assert runner.latest_checkpoint(job).name == "step-000001.pt"
    stint = Stint.objects.get(job=job)
    assert stint.ended_at is not None and stint.end_reason == "budget_exhausted"


def test_an_error_fails_the_job_with_its_text_and_ends_the_stint(make_job):
    job = make_job(steps=4)
    job.checkpoint_dir.mkdir(parents=True)
    runner.checkpoint_path(job, 2).write_bytes(b"not a checkpoint")

    job = runner.run(job.pk)

    assert job.status == "failed"
    assert job.error, "the error text is kept for people"
    assert StatusChange.objects.filter(job=job).last().reason == job.error
    stint = Stint.objects.get(job=job)
    assert stint.ended_at is not None and stint.end_reason == "failed"
    assert job.can_resume


def test_a_job_asking_for_a_missing_gpu_fails_naming_what_the_node_has_and_offers_no_resume(make_job):
    # A worker said it had cuda:99 (so the start accepts the job), but the node that runs it has none.
    Worker.report("jobs@gpu-z", "gpu-z", ["jobs", "jobs@gpu-z"], ["cpu", "cuda:99"])
    job = Job.start(name="gpu", team="t", env="arithmetic", config={"steps": 1}, device="cuda:99", enqueue=False)
    job = runner.run(job.pk)
    assert job.status == "failed"
    assert "device cuda:99 was requested but" in job.error and "CUDA device(s)" in job.error
    assert not Stint.objects.filter(job=job).exists()
    # A resume would land on a node without it again: not offered, and refused saying why.
    assert not job.can_resume and "cuda:99 is not on the worker that ran it" in job.not_resumable_reason
    assert job.resume() is False and Job.objects.get(pk=job.pk).status == "failed"
    assert job.resume_refusal().startswith(f"job {job.pk} cannot be resumed: its device cuda:99 is not on")


def test_the_failure_for_a_missing_device_is_announced_with_no_resume(transactional_db, make_job):
    from tests.live_events import run_collecting

    Worker.report("jobs@gpu-z", "gpu-z", ["jobs", "jobs@gpu-z"], ["cpu", "cuda:99"])
    job = Job.start(name="gpu", team="t", env="arithmetic", config={"steps": 1}, device="cuda:99", enqueue=False)
    _, events = run_collecting(lambda: runner.run(job.pk), ["jobs"])
    failed = [e for e in events if e.get("kind") == "status" and e["data"]["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["data"]["can_resume"] is False and failed[0]["data"]["can_stop"] is False


def test_a_job_that_is_not_queued_is_left_alone(make_job):
    job = make_job()
    job.request_stop()
    assert runner.run(job.pk).status == "stopped"
    assert not Stint.objects.filter(job=job).exists()
    assert runner.run(987654321) is None


def test_a_worker_whose_job_was_failed_by_the_crash_detector_lets_it_go(make_job):
    def declared_dead(job, step, metrics):
        if step == 1:
            Job.objects.filter(pk=job.pk).update(heartbeat_at=None)
            Job.fail_crashed(limit_s=60)

    job = runner.run(make_job(steps=50).pk, progress=declared_dead)
    assert job.status == "failed" and job.steps_done == 1
    assert "stopped answering" in job.error
    assert Stint.objects.get(job=job).ended_at is not None


def test_it_publishes_steps_and_status_changes_after_commit(transactional_db, make_job):
    import asyncio

    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from yardstick.live import group_name

    job = make_job(steps=2)
    layer = get_channel_layer()

    async def listen_and_collect(run):
        channel = await layer.new_channel()
        await layer.group_add(group_name(f"job.{job.pk}"), channel)
        await layer.group_add(group_name("jobs"), channel)
        await asyncio.get_running_loop().run_in_executor(None, run)
        events = []
        try:
            while True:
                # the runner sent every event before it returned: half a second of quiet ends the list
                events.append(await asyncio.wait_for(layer.receive(channel), timeout=0.5))
        except asyncio.TimeoutError:
            return events

    def run_in_thread():  # the runner is sync: it runs in an executor thread, with its own connection
        from django.db import connection

        try:
            runner.run(job.pk)
        finally:
            connection.close()

    events = async_to_sync(listen_and_collect)(run_in_thread)

    steps = [e["data"]["step"] for e in events if e["kind"] == "step"]
    statuses = [(e["data"]["from"], e["data"]["status"]) for e in events if e["kind"] == "status"]
    assert steps == [0, 1, 2]
    assert statuses == [("queued", "running"), ("running", "completed")]
    last = next(e for e in events if e["kind"] == "step" and e["data"]["step"] == 2)
    assert last["topic"] == f"job.{job.pk}" and "train/reward_mean" in last["data"]["metrics"]

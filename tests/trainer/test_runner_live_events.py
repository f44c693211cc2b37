"""What the runner tells the pages besides steps: compact progress for the Jobs list, and a rewind on resume."""

from tests.trainer.helpers import run_collecting
from trainer import runner
from trainer.models import Step


def test_each_step_is_also_published_to_the_jobs_list_as_progress(transactional_db, make_job):
    job, events = run_collecting(make_job(steps=3))

    assert job.status == "completed", job.error
    progress = [e for e in events if e["kind"] == "progress"]
    assert all(e["topic"] == "jobs" for e in progress)
    rewards = dict(Step.objects.filter(job=job).values_list("step", "reward_mean"))
    assert [e["data"] for e in progress] == [
        {"id": job.pk, "step": s, "steps": 3, "reward_mean": rewards[s]} for s in range(4)]
    assert rewards[3] is not None


def test_a_resume_from_an_earlier_checkpoint_publishes_a_rewind_before_the_steps_run_again(transactional_db,
                                                                                            make_job):
    def crash_after_3(job, step, metrics):
        if step == 3:
            raise RuntimeError("the worker died")

    job, _ = run_collecting(make_job(steps=4, checkpoint_every=2), progress=crash_after_3)
    assert job.status == "failed" and job.steps_done == 3
    assert runner.latest_checkpoint(job).name == "step-000002.pt", "step 3 has a row but no checkpoint"
    assert job.resume() is True

    job, events = run_collecting(job)

    assert job.status == "completed", job.error
    mine = [(e["kind"], e["data"]) for e in events if e["topic"] == f"job.{job.pk}" and e["kind"] in ("rewind", "step")]
    assert mine[0] == ("rewind", {"job": job.pk, "through": 2})
    assert [d["step"] for kind, d in mine if kind == "step"] == [3, 4], "then step 3 runs again"


def test_each_step_event_carries_the_rollouts_the_step_kept(transactional_db, make_job):
    from trainer.models import Sample

    job, events = run_collecting(make_job(steps=2))

    assert job.status == "completed", job.error
    steps = {e["data"]["step"]: e["data"]["samples"] for e in events if e["kind"] == "step"}
    assert steps[0] == [], "the baseline keeps no rollouts"
    for n in (1, 2):
        kept = [s.to_dict() for s in Sample.objects.filter(job=job, step=n).order_by("index")]
        assert kept and steps[n] == kept


def test_where_the_job_runs_is_published_when_its_stint_opens_and_the_final_status_event_ends_it(
        transactional_db, make_job):
    job, events = run_collecting(make_job(steps=1))

    assert job.status == "completed", job.error
    opened = [e["data"] for e in events if e["kind"] == "stints"]
    assert len(opened) == 1 and opened[0]["job"] == job.pk
    [stint] = opened[0]["stints"]
    assert stint["ended_at"] is None and stint["device"] == "cpu"
    done = [e["data"] for e in events if e["kind"] == "status" and e["data"]["status"] == "completed"][0]
    assert done["change"]["from"] == "running" and done["change"]["to"] == "completed"
    assert done["change"]["reason"] == "all 1 steps done"
    [ended] = done["stints"]
    assert ended["ended_at"] is not None and ended["end_reason"] == "completed" and ended["last_step"] == 1
    assert (done["can_stop"], done["can_resume"]) == (False, False)

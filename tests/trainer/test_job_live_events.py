"""What a job's status changes tell its page: the history row they add, and where the job ran."""

from datetime import timedelta

from django.utils import timezone

from tests import live_events
from trainer.models import Job, Stint


def test_a_crashed_jobs_page_hears_its_failure_and_then_its_stint_ended_as_crashed(transactional_db, make_job):
    job = make_job()
    job.claim()
    Stint.objects.create(job=job, node="n1", device="cpu", pid=42)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=300))

    failed, events = live_events.run_collecting(lambda: Job.fail_crashed(limit_s=120),
                                                [f"job.{job.pk}", "jobs"], quiet_s=1)

    assert [j.pk for j in failed] == [job.pk]
    status = [e["data"] for e in events if e["kind"] == "status"]
    assert [(s["change"]["from"], s["change"]["to"]) for s in status] == [("running", "failed")]
    assert status[0]["change"]["reason"].startswith("the worker on n1 (pid 42) stopped answering")
    assert (status[0]["can_stop"], status[0]["can_resume"]) == (False, True)
    [stints] = [e["data"]["stints"] for e in events if e["kind"] == "stints"]
    assert [(s["node"], s["end_reason"]) for s in stints] == [("n1", "crashed")] and stints[0]["ended_at"]

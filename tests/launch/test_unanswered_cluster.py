"""A launched job whose cluster does not answer (nothing listens at its address, port 9 here: every call is refused,
as when a Ray head died): a Stop still ends it once its graces are over, each step saying what it did, its stints
closed and the job saying its scheduler's job may still run there; the Jobs list and the job's header say since when
its cluster has not answered; an admin forgets the dead cluster, which ends its live jobs saying so. The follower's
real pass (launch.remote.follow) runs against the real database; no Ray is needed (tests/launch/test_ray.py runs
the same on a real head whose link is cut, and takes the cluster's word once it answers again)."""

import re
from datetime import timedelta

import pytest

from launch import remote
from launch.kind import start
from launch.models import Cluster, Launch, OutputLine, Recipe
from trainer.models import Job, Status, Stint

DEAD = "http://127.0.0.1:9"

pytestmark = pytest.mark.django_db(transaction=True)


def _running(admin_user, name="steps", grace=(0, 0)):
    """A job running on the dead cluster, as the follower left it after submitting it (its Ray submission id)."""
    Recipe.define(name, {"argv": ["python", "train.py"], "executor": "ray", "stop_grace_s": list(grace)}, admin_user)
    job = start(recipe=name, team="rl", created_by=admin_user, cluster="dead")
    assert job.claim("submitted by Yardstick's follower to ray cluster dead")
    Launch.objects.filter(pk=job.pk).update(remote_id=f"yardstick-job-{job.pk}-1", starts=1, remote_status="RUNNING")
    Stint.objects.create(job=job, node="ray-worker", device="cpu", device_name="cpu", pid=4242)
    return job


def _said(job):
    return [t for t in OutputLine.objects.filter(job=job, stream="yardstick").values_list("text", flat=True)]


@pytest.fixture
def dead(admin_user):
    return Cluster.register({"name": "dead", "address": DEAD}, admin_user)[0]


def test_a_stop_ends_a_job_whose_cluster_does_not_answer_once_its_graces_are_over(dead, admin_user, client):
    job = _running(admin_user)
    remote.follow(job.pk)
    launch = Launch.objects.get(pk=job.pk)
    assert launch.unreachable_since is not None and Job.objects.get(pk=job.pk).status == Status.RUNNING
    assert Job.objects.get(pk=job.pk).status_note.startswith("cluster dead not answering since ")
    client.force_login(admin_user)
    for page in ("/jobs", f"/jobs/{job.pk}"):
        html = client.get(page).content.decode()
        assert re.search(rf'<span class="badge warn status-note" data-job="{job.pk}"\s+title="[^"]+">cluster dead not '
                         'answering since', html), html

    assert job.request_stop(by="ada")
    remote.follow(job.pk)  # graces of 0 s: the flag, no cancel (nobody to ask), then the end, in one pass
    job = Job.objects.get(pk=job.pk)
    assert job.status == Status.STOPPED, "a Stop never waits for a cluster that does not answer"
    reason = job.status_changes.last().reason
    assert "ray cluster dead has not answered since" in reason and "it may still run there" in reason, reason
    said = _said(job)
    assert said[-3].startswith("stop requested: the run's stop flag is set; ray stops it in 0 s if it runs on "
                               "(cluster dead does not answer now")
    assert "does not answer, so ray cannot be asked to stop its job" in said[-2]
    assert said[-1] == f"ended stopped: {reason}"
    assert not Stint.objects.filter(job=job, ended_at__isnull=True).exists(), "its stints close with it"
    launch = Launch.objects.get(pk=job.pk)
    assert launch.stop_step == remote.NO_ANSWER
    assert launch.unreachable_since is not None, "kept: the cluster's word is taken when it answers"
    assert job.status_note.endswith(": its ray job may still run there")
    assert not job.can_resume and job.not_resumable_reason == "" and (
        f"may still run on cluster {launch.cluster.name}, which has not answered since" in job.resume_refusal()), \
        "a second start would run beside it"
    assert remote.follow_all() == 1, "the follower keeps asking the cluster about it"
    assert Job.objects.get(pk=job.pk).status == Status.STOPPED and len(_said(job)) == len(said), "nothing more said"


def test_a_stop_waits_out_its_graces_for_a_cluster_that_does_not_answer(dead, admin_user):
    job = _running(admin_user, grace=(60, 30))
    job.request_stop(by="ada")
    remote.follow(job.pk)
    assert Job.objects.get(pk=job.pk).status == Status.STOPPING, "the run may still end itself at its flag"
    assert _said(job)[-1].startswith("stop requested: the run's stop flag is set; ray stops it in 60 s")
    # 60 s later: nobody to send SIGTERM to; 90 s later: the end.
    Launch.objects.filter(pk=job.pk).update(stop_flag_at=Launch.objects.get(pk=job.pk).stop_flag_at
                                            - timedelta(seconds=61))
    remote.follow(job.pk)
    assert Job.objects.get(pk=job.pk).status == Status.STOPPING
    assert "ends the job here in 30 s if the cluster still does not answer" in _said(job)[-1]
    Launch.objects.filter(pk=job.pk).update(stop_flag_at=Launch.objects.get(pk=job.pk).stop_flag_at
                                            - timedelta(seconds=30))
    remote.follow(job.pk)
    assert Job.objects.get(pk=job.pk).status == Status.STOPPED


def test_an_admin_forgets_a_cluster_that_does_not_answer_and_its_live_jobs_end_saying_so(dead, admin_user, client):
    running = _running(admin_user)
    queued = start(recipe="steps", team="rl", created_by=admin_user, cluster="dead")
    client.force_login(admin_user)
    refused = client.post("/clusters/dead/forget")
    assert Cluster.objects.filter(name="dead").exists(), "it has not been found dead yet: its jobs are followed"
    assert refused.status_code == 302
    remote.follow(running.pk)  # the follower finds it does not answer
    done = client.post("/clusters/dead/forget", follow=True)
    assert not Cluster.objects.filter(name="dead").exists()
    page = done.content.decode()
    assert f"It did not answer, so its live jobs #{running.pk}, #{queued.pk} ended here" in page, page
    running, queued = Job.objects.get(pk=running.pk), Job.objects.get(pk=queued.pk)
    assert running.status == Status.FAILED and "may still run there" in running.error
    assert running.error.startswith("ray cluster dead was forgotten by ada after it had not answered since")
    assert queued.status == Status.STOPPED
    assert not Stint.objects.filter(job=running, ended_at__isnull=True).exists()
    assert Launch.objects.get(pk=running.pk).cluster is None


class Silent:
    """A cluster address that accepts each connection and closes it unanswered, counting them."""

    def __init__(self):
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def test_a_pass_asks_a_silent_cluster_about_its_ended_jobs_once_however_many_it_left(admin_user):
    silent = Silent()
    Cluster.register({"name": "silent", "address": silent.address}, admin_user)
    Recipe.define("left", {"argv": ["python", "train.py"], "executor": "ray"}, admin_user)

    def left_there():
        job = start(recipe="left", team="rl", created_by=admin_user, cluster="silent")
        assert job.claim("submitted")
        Launch.objects.filter(pk=job.pk).update(remote_id=f"yardstick-job-{job.pk}-1", starts=1,
                                                unreachable_since=job.created_at)
        assert Job.objects.get(pk=job.pk).finish(Status.STOPPED, "ended while its cluster did not answer")

    left_there()
    remote.follow_all()
    one = silent.accepted
    assert one > 0, "the cluster is asked"
    for _ in range(3):
        left_there()
    remote.follow_all()
    assert silent.accepted - one == one, "one job's questions a pass, not one per job it left there"
    silent.sock.close()

"""Jobs workers announce what they have; each job goes only to one that can run it, and one that nobody can
run is refused at start, naming what the workers have."""

import json
import os
import signal
import socket
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.trainer.helpers import TINY, worker_process
from tests.waiting import wait_for
from trainer.kinds.embedded import replace_orphans
from trainer.models import Job, Worker
from trainer.workers import local_devices


def post_job(client, device="auto", **where):
    return client.post("/api/jobs", json.dumps({"name": "gpu run", "team": "research", "env": "arithmetic",
                                                 "config": {**TINY, "steps": 2}, "device": device, **where}),
                       content_type="application/json")


def queued_in(queue):
    """run_job messages waiting in `queue`, read from the broker (kombu's Redis transport: one list per queue)."""
    return redis.Redis.from_url(settings.REDIS_URL).llen(queue)


def fleet():
    """Three live jobs workers: a shared CPU node, a shared node with two GPUs, a CPU node of research's pool."""
    Worker.report("jobs@cpu-a", "cpu-a", ["jobs", "jobs@cpu-a"], ["cpu"], cores=2)
    Worker.report("jobs@gpu-b", "gpu-b", ["jobs", "jobs@gpu-b"], ["cpu", "cuda:0", "cuda:1"], cores=16,
                  gpus=[{"index": i, "uuid": f"GPU-b{i}", "name": "NVIDIA H200", "memory_mib": 143771} for i in (0, 1)])
    Worker.report("jobs@res-c", "res-c", ["jobs@res-c"], ["cpu"], team="research", cores=3)


def test_a_device_no_jobs_worker_has_is_refused_naming_what_the_workers_have(db, client, operator):
    Worker.report("jobs@host-a", "host-a", ["jobs"], ["cpu"], cores=2)
    Worker.report("jobs@host-b", "host-b", ["jobs"], ["cpu", "cuda:0"], cores=8)
    client.force_login(operator)

    resp = post_job(client, "cuda:1")
    assert resp.status_code == 400
    assert resp.json() == {"field": "device", "error": "device cuda:1 is not on any jobs worker: workers have "
                                                       "jobs@host-a on host-a: 2 cores, shared; jobs@host-b on host-b: "
                                                       "8 cores, 1 × CUDA GPU (cuda:0), shared; use auto or one of those"}
    assert Job.objects.count() == 0
    assert post_job(client, "cuda").status_code == 201, "host-b has a GPU"
    assert post_job(client, "cuda:0").status_code == 201


def test_each_job_goes_only_to_a_worker_that_has_what_it_asks_for(db, client, operator,
                                                                   django_capture_on_commit_callbacks):
    fleet()
    client.force_login(operator)
    queues = ("jobs", "jobs@gpu-b", "jobs@cpu-a", "jobs@res-c")
    before = {q: queued_in(q) for q in queues}  # the broker outlives tests: count what this one adds
    with django_capture_on_commit_callbacks(execute=True):
        anywhere = post_job(client, "cpu").json()
        two_gpus = post_job(client, "cuda", devices=2).json()
        on_a = post_job(client, node="cpu-a").json()
        pooled = post_job(client, pool="research").json()
        two_cpus = post_job(client, "cpu", devices=2, pool="research").json()
    # Nothing in particular, on cpu: the shared queue, which only the shared workers consume.
    assert anywhere["placed_on"] == ""
    # GPUs: from the line (trainer/queue.py), on the node that has them free, given by index.
    assert (two_gpus["placed_on"], two_gpus["devices"], two_gpus["gpus"], two_gpus["in_line"]) == (
        "jobs@gpu-b", 2, [0, 1], False)
    assert on_a["placed_on"] == "jobs@cpu-a"
    assert pooled["placed_on"] == two_cpus["placed_on"] == "jobs@res-c"
    assert [queued_in(q) - before[q] for q in queues] == [1, 1, 1, 2]


def test_a_job_nobody_can_run_is_refused_at_once_naming_the_field_and_what_there_is(db, client, operator):
    fleet()
    client.force_login(operator)
    cases = {
        "devices": (post_job(client, "cuda", devices=3), "no jobs worker has 3 × cuda: workers have "),
        "node": (post_job(client, node="gpu-z"), "no jobs worker is on node gpu-z: workers have "),
        "pool": (post_job(client, pool="infra"), "no jobs worker serves pool infra: workers have "),
    }
    for field, (resp, start) in cases.items():
        assert resp.status_code == 400 and resp.json()["field"] == field, resp.json()
        assert resp.json()["error"].startswith(start)
        assert "jobs@gpu-b on gpu-b: 16 cores, 2 × NVIDIA H200 (cuda:0, cuda:1), shared" in resp.json()["error"]
        assert "jobs@res-c on res-c: 3 cores, pool research" in resp.json()["error"]
    # research's pool has no GPU; 4 CPU processes are more than its 3 cores.
    assert post_job(client, "cuda", pool="research").json()["error"].startswith(
        "device cuda is not on any jobs worker in pool research")
    assert post_job(client, "cpu", devices=4, pool="research").json()["field"] == "devices"
    assert Job.objects.count() == 0


def test_bad_placement_fields_are_named_and_store_nothing(db, client, operator):
    fleet()
    client.force_login(operator)
    for where, field in (({"devices": "2"}, "devices"), ({"devices": 0}, "devices"), ({"devices": True}, "devices"),
                         ({"node": "two words"}, "node"), ({"pool": 7}, "pool")):
        resp = post_job(client, "auto", **where)
        assert resp.status_code == 400 and resp.json()["field"] == field, (where, resp.json())
    resp = post_job(client, "cuda:0", devices=2)
    assert resp.json() == {"field": "devices", "error": "devices 2 needs device auto, cpu or cuda (one process "
                                                        "per device); cuda:0 names one GPU"}
    resp = client.post("/api/jobs", json.dumps({"name": "x", "team": "t", "env": "arithmetic", "devices": 2,
                                                 "config": {**TINY, "prompts_per_step": 1}}),
                       content_type="application/json")
    assert resp.json() == {"field": "config.prompts_per_step", "error": "config.prompts_per_step must be at least "
                           "devices (2): each device takes whole prompt groups; got 1"}
    assert Job.objects.count() == 0


def test_with_no_live_jobs_worker_only_a_job_any_worker_could_run_waits_in_the_queue(db, client, operator):
    long_gone = timezone.now() - timedelta(seconds=Worker.STALE_S + 1)
    Worker.objects.create(name="jobs@old", host="old", queues=["jobs"], devices=["cpu"], seen_at=long_gone)
    Worker.report("default@host-a", "host-a", ["default"], ["cpu"])  # not a jobs worker
    client.force_login(operator)
    resp = post_job(client, "auto")
    assert resp.status_code == 201 and resp.json()["status"] == "queued" and resp.json()["placed_on"] == ""
    refused = post_job(client, "cuda")
    assert refused.json()["error"].startswith("no jobs worker has reported, so nobody can run device cuda: start one")
    assert Job.objects.count() == 1


def test_gpu_jobs_go_where_most_gpus_are_free_and_the_next_waits_in_line(db, client, operator):
    fleet()
    # No NVML there: its GPUs are the cuda devices torch sees.
    Worker.report("jobs@gpu-d", "gpu-d", ["jobs", "jobs@gpu-d"], ["cpu", "cuda:0"], cores=8)
    client.force_login(operator)
    placed = [post_job(client, "cuda").json() for _ in range(4)]
    assert [(j["placed_on"], j["gpus"]) for j in placed[:3]] == [("jobs@gpu-b", [0]), ("jobs@gpu-b", [1]),
                                                                 ("jobs@gpu-d", [0])], "most free first; ties by name"
    assert (placed[3]["in_line"], placed[3]["line_place"], placed[3]["placed_on"]) == (True, 1, "")


def test_resume_places_the_job_again_and_is_refused_while_nobody_can_run_it(db, client, operator):
    fleet()
    client.force_login(operator)
    job = Job.objects.get(pk=post_job(client, "cuda", devices=2).json()["id"])
    job.request_stop(by="test")
    job.refresh_from_db()
    assert job.status == "stopped"
    Worker.objects.filter(name="jobs@gpu-b").update(seen_at=timezone.now() - timedelta(seconds=Worker.STALE_S + 1))
    resp = client.post(f"/api/jobs/{job.pk}/resume")
    assert resp.status_code == 409
    assert resp.json()["error"].startswith(f"job {job.pk} cannot be resumed now: device cuda is not on any jobs "
                                           "worker: workers have jobs@cpu-a on cpu-a")
    job.refresh_from_db()
    assert job.status == "stopped"
    Worker.report("jobs@gpu-e", "gpu-e", ["jobs", "jobs@gpu-e"], ["cpu", "cuda:0", "cuda:1"], cores=8)
    assert client.post(f"/api/jobs/{job.pk}/resume").status_code == 200
    job.refresh_from_db()
    assert (job.status, job.placed_on) == ("queued", "jobs@gpu-e")


def test_a_queued_job_whose_worker_went_away_is_sent_to_another_that_can_run_it(db, client, operator,
                                                                               django_capture_on_commit_callbacks):
    fleet()
    client.force_login(operator)
    before = queued_in("jobs@gpu-f")
    job_id = post_job(client, "cuda").json()["id"]
    Worker.report("jobs@gpu-f", "gpu-f", ["jobs", "jobs@gpu-f"], ["cpu", "cuda:0"], cores=8)
    assert replace_orphans() == [], "its worker is alive: it stays"
    Worker.objects.filter(name="jobs@gpu-b").update(seen_at=timezone.now() - timedelta(seconds=Worker.STALE_S + 1))
    with django_capture_on_commit_callbacks(execute=True):
        moved = replace_orphans()
    assert moved == [], "a GPU job is not moved: it goes back in the line, at its place"
    job = Job.objects.get(pk=job_id)
    assert (job.placed_on, job.gpus, job.in_line) == ("jobs@gpu-f", [0], False), "the line's pass placed it again"
    assert job.waiting_for == "its jobs worker jobs@gpu-b stopped reporting before it started the job"
    assert queued_in("jobs@gpu-f") - before == 1
    cpu_id = post_job(client, "cpu", pool="research").json()["id"]
    Worker.report("jobs@res-g", "res-g", ["jobs@res-g"], ["cpu"], team="research", cores=3)
    Worker.objects.filter(name="jobs@res-c").update(seen_at=timezone.now() - timedelta(seconds=Worker.STALE_S + 1))
    with django_capture_on_commit_callbacks(execute=True):
        moved = replace_orphans()
    assert [j.pk for j in moved] == [cpu_id] and Job.objects.get(pk=cpu_id).placed_on == "jobs@res-g", "a cpu job is"


def test_a_queued_job_placed_before_its_worker_restarted_is_sent_to_it_again_with_its_gpus(
        db, client, operator, django_capture_on_commit_callbacks):
    """A worker restarted under its name holds nothing an earlier process of it took: the job is sent to the new
    process again, keeping the GPU the line gave it, once; a job placed since is left alone."""
    fleet()
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=True):
        job_id = post_job(client, "cuda").json()["id"]
    job = Job.objects.get(pk=job_id)
    assert (job.placed_on, job.gpus) == ("jobs@gpu-b", [0])
    assert replace_orphans() == [], "the process it was placed on still runs"
    restarted = timezone.now()
    Worker.objects.filter(name="jobs@gpu-b").update(started_at=restarted)  # its new process reported
    with django_capture_on_commit_callbacks(execute=True):
        later_id = post_job(client, "cuda").json()["id"]
    before = queued_in("jobs@gpu-b")
    with django_capture_on_commit_callbacks(execute=True):
        sent = replace_orphans(worker="jobs@gpu-b")
    assert [j.pk for j in sent] == [job_id]
    job.refresh_from_db()
    assert (job.status, job.placed_on, job.gpus) == ("queued", "jobs@gpu-b", [0]) and job.placed_at >= restarted
    assert queued_in("jobs@gpu-b") - before == 1
    assert Job.objects.get(pk=later_id).placed_at >= restarted
    assert replace_orphans() == [], "sent once"


def test_the_workers_api_and_the_start_form_show_where_jobs_can_run(db, client, operator):
    fleet()
    client.force_login(operator)
    workers = client.get("/api/workers").json()["workers"]
    assert [(w["name"], w["node"], w["pool"], w["cores"]) for w in workers] == [
        ("jobs@cpu-a", "cpu-a", "", 2), ("jobs@gpu-b", "gpu-b", "", 16), ("jobs@res-c", "res-c", "research", 3)]
    assert [g["uuid"] for g in workers[1]["gpus"]] == ["GPU-b0", "GPU-b1"]
    page = client.get("/jobs").content.decode()
    assert '<option>gpu-b</option>' in page and '<option>research</option>' in page
    assert "2 × NVIDIA H200</span>" in page and "<td>research</td>" in page


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
        assert (row.team, row.cores, row.gpus) == ("", len(os.sched_getaffinity(0)), [])  # no NVIDIA GPU here
        assert list(Worker.live("jobs")) == [row]
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    assert not Worker.objects.filter(name=name).exists(), "a stopped worker no longer counts"


def test_a_shutdown_signal_in_the_middle_of_a_query_asks_the_stop_and_leaves_that_query_alone(transactional_db):
    """Celery calls the warm-shutdown handlers from its SIGTERM handler, in the worker's main thread, between two
    of its bytecodes: perhaps while that thread waits on a query (its worker_ready handler placing waiting jobs,
    under load). The handler asks this process's jobs to stop over a connection of its own; the query goes on to
    its answer, and the connection serves the worker's next query (the forgetting of its row on the way out).
    Closing the main thread's connection there left the worker hung and its row counted."""
    from django.db import connection

    from tests.dashboard import builders as b
    from trainer.models import Stint
    from trainer.tasks import stop_this_workers_jobs

    job = b.job(name="mine")
    Stint.objects.create(job=job, node=settings.YARDSTICK_NODE, device="cpu", pid=os.getpid())
    asked = []
    before = signal.signal(signal.SIGALRM, lambda *_: asked.append(stop_this_workers_jobs(sig="SIGTERM", how="Warm")))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(1.5), 7")
            assert cursor.fetchone()[1] == 7
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert asked == [None], "the handler ran while the query waited"
    job.refresh_from_db()
    assert (job.status, job.stop_requested) == ("stopping", True)
    assert job.interrupted_by == "worker shutting down (Warm)"
    assert Worker.objects.filter(name="nobody").delete()[0] == 0  # the main thread's connection still serves

"""Jobs in the Django admin: listed and shown read-mostly; stop and resume go through the model."""

from trainer.models import Job, Stint, Worker


def test_an_admin_sees_the_job_list_and_a_job_with_its_history_and_stints(admin_user, client, make_job):
    job = make_job()
    job.claim()
    Stint.objects.create(job=job, node="gpu-node-1", device="GPU-1234", device_name="NVIDIA H200", pid=7)
    client.force_login(admin_user)
    assert client.get("/admin/trainer/job/").status_code == 200
    page = client.get(f"/admin/trainer/job/{job.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "gpu-node-1" in html and "GPU-1234" in html and "claimed by a worker" in html
    assert client.get("/admin/trainer/job/add/").status_code == 403, "jobs are started with a validated config"


def test_the_stop_action_cancels_a_queued_job(admin_user, client, make_job):
    job = make_job()
    client.force_login(admin_user)
    resp = client.post("/admin/trainer/job/", {"action": "stop_jobs", "_selected_action": [job.pk]})
    assert resp.status_code == 302
    assert Job.objects.get(pk=job.pk).status == "stopped"


def test_an_operator_cannot_open_the_admin(operator, client, make_job):
    make_job()
    client.force_login(operator)
    assert client.get("/admin/trainer/job/").status_code == 302


def test_an_admin_sees_what_devices_each_worker_reported(admin_user, client, db):
    Worker.report("jobs@gpu-node-1", "gpu-node-1", ["jobs"], ["cpu", "cuda:0"])
    client.force_login(admin_user)
    html = client.get("/admin/trainer/worker/").content.decode()
    assert "jobs@gpu-node-1" in html and "cuda:0" in html
    assert client.get("/admin/trainer/worker/add/").status_code == 403, "the workers write these rows"

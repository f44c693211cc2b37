"""Recipes launched as batch jobs on a real one-node Slurm cluster (tests/slurm_cluster.py: Debian's slurmctld and
slurmd on this machine, two gres GPUs it counts, shared by every test here in one xdist group), followed by the
real follower (launch/remote.py) as beat runs it: a run that reports through MLflow, its output on the job page,
stopped from the browser until Slurm says CANCELLED; a crash with Slurm's exit code; a control plane restarted
mid-run; a second launch that waits while the first holds every CPU (PENDING, Resources) and runs once the first
is stopped. No machine here has a GPU: the recipes ask for CPUs, except where the batch options are
read back."""

import re
import sys
from datetime import datetime

import pytest

from launch.models import Cluster
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import in_thread, log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.launch.conftest import cluster_recipe, job_of, launch, output
from tests.ray_head import free_port
from tests.slurm_cluster import SlurmCluster, missing
from tests.waiting import wait_for
from trainer.models import Status
from yardstick.inputs import InputError

PY = sys.executable
STEPS = "{yardstick}/tests/launch/steps_script.py"
# One xdist group with the Ray tests: both mostly wait on their scheduler, in turn, while the other worker works.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("clusters")]


@pytest.fixture(scope="module")
def slurm():
    why = missing()
    if why:
        pytest.fail(why)
    running = SlurmCluster().start()
    yield running
    running.stop()


@pytest.fixture
def cluster(slurm, transactional_db, admin_user):
    row = Cluster.register({"name": "hpc", "kind": "slurm", "address": str(slurm.conf), "python": PY}, admin_user)[0]
    yield row
    slurm.cancel_all()  # nothing a test left holds the node's CPUs for the next


@pytest.fixture
def slurm_recipe(recipe, tmp_path):
    return cluster_recipe(recipe, tmp_path, "slurm", "hpc")


def test_a_batch_job_gets_its_options_and_variables_quoted_whole_and_a_crash_fails_it_with_slurms_exit_code(
        cluster, slurm_recipe, reporting, follower, admin_user, slurm, client):
    script = ("import os, sys, time; print('job', os.environ['YARDSTICK_JOB_ID'], 'argv', sys.argv[1:]);"
              "print('leaked' if 'DATABASE_URL' in os.environ else 'clean env');"
              "print('bad config: lr < 0', file=sys.stderr); time.sleep(2); sys.exit(3)")
    with pytest.raises(InputError, match=r"slurm.time_limit names \{minutes\}, which is no parameter"):
        slurm_recipe("crashes", [PY, "-c", script, "{note}"], slurm={"time_limit": "{minutes}"},
                     params=[{"name": "note", "kind": "string", "default": "x"}])
    slurm_recipe("crashes", [PY, "-c", script, "{note}"],
                 params=[{"name": "note", "kind": "string", "default": "x"},
                         {"name": "minutes", "kind": "integer", "default": 5, "minimum": 1, "maximum": 60}],
                 slurm={"time_limit": "{minutes}", "nodes": 1, "gpus_as": "gres"},
                 devices={"kind": "cuda", "count": 1})
    note = "it's $(touch /tmp/pwned) `id` \"quoted\"; a b"
    job = launch("crashes", admin_user, params={"note": note, "minutes": 7})
    assert (job.status, job.launch.executor, job.launch.cluster_id) == (Status.QUEUED, "slurm", cluster.pk)
    wait_for(lambda: job_of(job).status == Status.FAILED, 60, "the crashing batch job to fail")
    job = job_of(job)
    row = job.launch
    assert row.remote_id.isdigit() and row.remote_status == "FAILED" and row.exit_code == 3
    # As on a node: how it ended, the run's last line, and its last lines quoted below.
    assert job.error.splitlines()[0] == "FAILED: its batch script ended with exit code 3: bad config: lr < 0", job.error
    assert job.error.splitlines()[-1] == "bad config: lr < 0"
    said = output(job)
    assert f"job {job.pk} argv [{note!r}]" in said, "the value arrives as one argument, as typed"
    assert "clean env" in said and "bad config: lr < 0" in said
    assert f"submitted to slurm cluster hpc as {row.remote_id}" in said
    assert row.token.revoked, "its token dies with its batch job"
    # What Slurm was given: the job's name and start, the output file in its directory, the recipe's options.
    record = slurm.job(row.remote_id)
    assert record["JobName"] == f"yardstick-{job.pk}" and record["Comment"] == f"yardstick-job-{job.pk}-1"
    assert record["StdOut"] == f"{row.job_dir}/slurm-{row.remote_id}.out" and record["TimeLimit"] == "00:07:00"
    assert record["TresPerNode"] == "gres:gpu:1" and record["JobState"] == "FAILED"
    assert row.allocation["nodes"] == slurm.node and row.allocation["gpus"] == 1 and row.allocation["end"]
    # Its one GPU was allocated and no agent measured it used: allocated idle, which no price of Yardstick's prices.
    client.force_login(admin_user)
    html = client.get(f"/jobs/{job.pk}").content.decode()
    seconds = (datetime.fromisoformat(row.allocation["end"]) - datetime.fromisoformat(row.allocation["start"])).seconds
    cpus = row.allocation["cpus"]
    assert seconds >= 2 and cpus == int(record["NumCPUs"])
    assert (f'Slurm gave it 1 GPU and\n      {cpus} CPU{"s" if cpus > 1 else ""} on 1 node (<code>{slurm.node}</code>)'
            in html)
    assert f'<span id="allocated-gpu-s">{seconds}</span> GPU-s allocated' in html
    assert f"allocated idle: {seconds} GPU-s" in html and "no price: no GPU of its nodes is priced" in html


def test_a_control_plane_restarted_mid_run_picks_its_batch_job_up_again(cluster, slurm_recipe, reporting, follower,
                                                                        admin_user, slurm):
    slurm_recipe("short", [PY, STEPS, "--out", "{job_dir}", "--steps", "12", "--sleep", "0.25"])
    job = launch("short", admin_user)
    wait_for(lambda: job_of(job).steps_done >= 1, 60, "the first step")
    assert job_of(job).launch.remote_status == "RUNNING"
    follower.stop()  # the control plane goes down; Slurm runs on
    remote_id = job_of(job).launch.remote_id
    wait_for(lambda: slurm.job(remote_id)["JobState"] == "COMPLETED", 60, "Slurm to finish the job")
    assert job_of(job).status == Status.RUNNING, "nothing followed it meanwhile"
    follower.start()
    wait_for(lambda: job_of(job).status == Status.COMPLETED, 30, "the job to be reconciled")
    job = job_of(job)
    assert job.steps_done == 12 and "step 12" in output(job), "every line of its output file is in its output"
    assert job.launch.remote_status == "COMPLETED" and job.launch.exit_code == 0
    assert job.launch.checkpoints[-1] == "step_12" and job.checkpoint_step == 12
    assert job.status_changes.last().reason == "its slurm job succeeded (at step 12)"
    assert job.status_changes.get(to_status=Status.RUNNING).reason == ("submitted by Yardstick's follower to slurm "
                                                                       "cluster hpc")


def test_a_controller_that_stops_answering_leaves_its_job_running_and_a_missing_slurm_conf_says_where(
        cluster, slurm_recipe, reporting, follower, admin_user, slurm, tmp_path):
    slurm_recipe("steady", [PY, STEPS, "--out", "{job_dir}", "--steps", "30", "--sleep", "0.2"])
    job = launch("steady", admin_user)
    wait_for(lambda: job_of(job).steps_done >= 1, 60, "the first step")
    # The same cluster as its login node would see it with the controller gone: nothing listens on its port.
    dead = tmp_path / "dead.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", slurm.conf.read_text())
                    + "MessageTimeout=1\n")
    Cluster.objects.filter(pk=cluster.pk).update(address=str(dead))
    wait_for(lambda: job_of(job).launch.unreachable_since is not None, 30, "the job to be marked unreachable")
    assert job_of(job).status == Status.RUNNING, "a controller that does not answer is not a failed job"
    assert "Unable to contact slurm controller" in Cluster.objects.get(pk=cluster.pk).error
    assert f"cluster unreachable: slurm cluster hpc ({dead})" in output(job)
    Cluster.objects.filter(pk=cluster.pk).update(address=str(slurm.conf))
    wait_for(lambda: job_of(job).status == Status.COMPLETED, 60, "the job to be followed again to its end")
    assert "cluster hpc answers again" in output(job) and job_of(job).steps_done == 30

    Cluster.objects.filter(pk=cluster.pk).update(address="/etc/nowhere/slurm.conf")
    lost = launch("steady", admin_user)
    wait_for(lambda: job_of(lost).status == Status.FAILED, 30, "a submission with no slurm.conf here to fail")
    assert job_of(lost).error.startswith("slurm cluster hpc (/etc/nowhere/slurm.conf) did not answer: "
                                         "/etc/nowhere/slurm.conf is not on this machine"), job_of(lost).error
    assert job_of(lost).launch.token.revoked, "the token issued for the start it could not submit dies with it"


def test_a_batch_job_stopped_at_its_flag_resumes_from_its_newest_checkpoint_as_a_new_batch_job(
        cluster, slurm_recipe, reporting, follower, admin_user, slurm):
    # 9 s for the run to see its flag: it asks every 3 s (a third of it; a minute's grace would ask every 10 s).
    slurm_recipe("resumable", [PY, STEPS, "--out", "{job_dir}", "--steps", "30", "--sleep", "0.2"],
                 resume_argv=["--from", "{checkpoint}"], stop_grace_s=[9, 3])
    job = launch("resumable", admin_user)
    wait_for(lambda: job_of(job).steps_done >= 3, 60, "three steps")
    job.request_stop(by="ada")
    wait_for(lambda: job_of(job).status == Status.STOPPED, 60, "the run to end itself at its stop flag")
    job = job_of(job)
    first_id, stopped_at = job.launch.remote_id, job.steps_done
    assert job.launch.remote_status == "COMPLETED" and job.launch.stop_step == "flag"
    assert job.status_changes.last().reason == (f"the run ended itself at its stop flag (at step {stopped_at}; slurm "
                                                "says COMPLETED)")
    assert job.launch.checkpoints[-1] == f"step_{stopped_at}" and job.resume_refusal() == ""

    assert job.resume(by=admin_user)
    wait_for(lambda: job_of(job).status == Status.COMPLETED, 60, "the resumed run to complete")
    job = job_of(job)
    assert job.launch.remote_id != first_id and job.launch.starts == 2
    assert slurm.job(job.launch.remote_id)["Comment"] == f"yardstick-job-{job.pk}-2"
    assert job.launch.argv[-2:] == ["--from", f"{job.launch.job_dir}/step_{stopped_at}"]
    assert f"starting at step {stopped_at}" in output(job) and job.steps_done == 30


def test_a_launch_waits_with_slurms_reason_while_another_holds_every_cpu_and_runs_once_that_one_is_stopped(  # noqa: F811
        cluster, slurm_recipe, reporting, follower, admin_user, slurm, live_web, page, django_user_model, output_dir,
        request):
    # The hog never looks at its stop flag: a Stop ends it by Slurm's cancel, after its grace (2 s). Slurm's own end
    # of a job at its time limit is not waited for here (limits are whole minutes, checked every 30 s: 60 to 90 s):
    # its TIMEOUT record is read in test_slurm_states.py, and a scheduler's message on the job page is shown in
    # test_clusters_pages.py.
    slurm_recipe("hog", [PY, "-c", "import time; print('holding every CPU', flush=True); time.sleep(600)"],
                 devices={"kind": "cpu", "count": slurm.cpus}, slurm={"time_limit": "1"})
    first = in_thread(lambda: launch("hog", admin_user))
    wait_for(lambda: job_of(first).launch.remote_status == "RUNNING", 60, "the first to run")
    assert slurm.job(job_of(first).launch.remote_id)["TimeLimit"] == "00:01:00"
    second = in_thread(lambda: launch("hog", admin_user))
    wait_for(lambda: job_of(second).launch.remote_status == "PENDING" and "Resources" in
             job_of(second).launch.remote_message, 60, "the second to wait for resources")
    assert job_of(second).launch.remote_message == ("waiting: Resources — the resources it asks for are in use by "
                                                    "other jobs")
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    record_events(page)
    log_in(page, live_web.url, "olga", f"/jobs/{second.pk}")
    wait_subscribed(page)
    remote = page.locator("#launch-remote")
    assert "Slurm says PENDING" in " ".join(remote.inner_text().split())
    assert page.inner_text("#launch-remote-message") == ("waiting: Resources — the resources it asks for are in use "
                                                         "by other jobs")
    page.wait_for_selector("#output-lines .line:has-text('slurm says PENDING: waiting: Resources')")
    shot(page, output_dir, request, "waiting")
    # The first is stopped; Slurm gives its CPUs to the second, which starts: its page says so live.
    in_thread(lambda: job_of(first).request_stop(by="ada"))
    wait_for(lambda: job_of(first).status == Status.STOPPED, 60, "the first to stop")
    assert job_of(first).launch.remote_status == "FAILED", "Slurm's word for a batch script ended by SIGTERM"
    assert "holding every CPU" in output(job_of(first))
    page.wait_for_selector("#launch-remote:has-text('Slurm says RUNNING')", timeout=60_000)
    assert page.locator("#launch-remote-message").count() == 0, "no reason once it runs"
    assert page.locator("#launch-allocation").inner_text().startswith(f"Slurm gave it 0 GPUs and {slurm.cpus} CPU")
    shot(page, output_dir, request, "running")


def test_an_operator_follows_a_batch_jobs_output_and_steps_and_stops_it_until_slurm_cancels_it(  # noqa: F811
        cluster, slurm_recipe, reporting, follower, admin_user, live_web, page, django_user_model, settings,
        output_dir, request, slurm):
    settings.YARDSTICK_URL = live_web.url  # the run reports to the server the page is on
    slurm_recipe("steps", [PY, STEPS, "--out", "{job_dir}", "--steps", "400", "--sleep", "0.3", "--ignore-stop",
                           "--ignore-term"])
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    job = in_thread(lambda: launch("steps", admin_user, name="on slurm"))
    record_events(page)
    log_in(page, live_web.url, "olga", f"/jobs/{job.pk}")
    wait_subscribed(page)
    page.wait_for_selector("#output-lines .line:has-text('step 3')", timeout=60_000)
    page.wait_for_function("Number(document.getElementById('steps-done').textContent) >= 3", timeout=30_000)
    shot(page, output_dir, request, "running")
    page.locator(f'[data-job-controls="{job.pk}"] .job-stop-form button').click()
    page.wait_for_selector("#job-status .status[data-status='stopped']", timeout=60_000)
    job = job_of(job)
    assert job.launch.remote_status == "CANCELLED" and job.launch.stop_step == "cancel"
    assert slurm.job(job.launch.remote_id)["JobState"] == "CANCELLED"
    reason = job.status_changes.last().reason
    assert reason == f"slurm stopped its job 2 s after its stop flag (at step {job.steps_done}; slurm says CANCELLED)"
    said = output(job)
    assert "slurm stops its job (SIGTERM" in said and "the run ran on 3 s after SIGTERM: slurm cancels its job" in said
    page.reload()
    page.wait_for_selector("#launch-remote:has-text('CANCELLED')")
    shot(page, output_dir, request, "stopped")


def test_an_admin_registers_the_slurm_cluster_by_its_form_and_an_operator_starts_a_recipe_there_from_the_start_form(
        slurm, transactional_db, follower, live_web, page, django_user_model, settings, output_dir,  # noqa: F811
        request, tmp_path):
    from launch.models import Recipe

    settings.YARDSTICK_URL = live_web.url
    ada = user_in_role(django_user_model, "ada", "admin", subprocess=True)
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    shared = tmp_path / "shared"
    Recipe.define("on-slurm", {"argv": [PY, STEPS, "--out", "{job_dir}", "--steps", "{steps}", "--sleep", "0.2"],
                               "params": [{"name": "steps", "kind": "integer", "default": 5, "minimum": 1,
                                           "maximum": 100}],
                               "executor": "slurm", "shared_dir": str(shared), "slurm": {"time_limit": "10"}}, ada)
    log_in(page, live_web.url, "ada", "/clusters")
    page.select_option("#f-kind", "slurm")
    page.fill("#f-name", "hpc")
    page.fill("#f-address", "http://slurm-head:6820")
    page.click("#register-submit")
    assert page.inner_text("#e-address").startswith("a Slurm cluster's address is the absolute path of the slurm.conf")
    assert not Cluster.objects.exists()
    page.fill("#f-address", str(slurm.conf))
    page.click("#register-submit")
    page.wait_for_url(live_web.url + "/clusters/hpc")
    node_row = page.locator(f'#nodes-table tr[data-node="{slurm.node}"]')
    assert "compute" in node_row.inner_text() and "alive" in node_row.inner_text()
    assert "the slurm.conf its commands" in page.inner_text("#cluster-facts")
    shot(page, output_dir, request, "cluster")

    page.context.clear_cookies()  # ada leaves; the operator comes
    log_in(page, live_web.url, "olga", "/jobs")
    page.click("details#start summary")
    page.select_option("#f-what", "recipe:on-slurm")
    select = page.locator("#f-on-slurm-cluster")
    select.wait_for(state="visible")
    assert select.input_value() == "hpc" and "on a Slurm cluster" in page.inner_text(
        'fieldset[data-what="recipe:on-slurm"] legend')
    page.fill("#f-team", "research")
    page.fill("#f-on-slurm-steps", "6")
    record_events(page)
    page.click("#start-submit")
    page.wait_for_url(live_web.url + "/jobs/*")
    wait_subscribed(page)
    page.wait_for_selector("#job-status .status[data-status='completed']", timeout=60_000)
    page.wait_for_selector("#output-lines .line:has-text('step 6')", timeout=30_000)
    job = job_of(Cluster.objects.get().launches.get().job)
    assert job.steps_done == 6 and job.launch.remote_status == "COMPLETED" and job.launch.values == {"steps": 6}
    page.reload()
    assert "Slurm says COMPLETED" in " ".join(page.inner_text("#launch-remote").split())
    assert " ".join(page.inner_text("#launch-allocation").split()).startswith(
        f"Slurm gave it 0 GPUs and 1 CPU on 1 node ({slurm.node})")
    shot(page, output_dir, request, "completed")

"""Recipes launched on a real local Ray head (tests/ray_head.py: `ray start --head` from the pinned package, shared
by every test here, one xdist group so one head serves them all), followed by the real follower (launch/remote.py)
as beat runs it: a run that reports through MLflow (steps on the job page, output lines, the host device of the
agent's node, tied by the address Ray names it by, held by the job) stopped from the browser; a job on a node no agent
measures, whose cost is "not measured"; a crashing entrypoint; a control plane restarted mid-run; a cluster that stops answering (through a relay) and answers again; a head killed and
started again, whose Ray job is then gone. No machine here has a GPU: the recipes ask for CPUs."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from collector.models import DeviceHolder
from launch.models import Cluster, Launch, OutputLine
from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import in_thread, log_in, record_events, shot, user_in_role, wait_subscribed
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture
from tests.faults import Relay
from tests.launch.conftest import cluster_recipe, job_of, launch, output
from tests.ray_head import RayHead
from tests.waiting import wait_for
from tracking.matching import BOUND_PID
from trainer.models import Job, Status, Stint

PY = sys.executable
STEPS = "{yardstick}/tests/launch/steps_script.py"
# One xdist group with the Slurm tests: both mostly wait on their scheduler, in turn, while the other worker works.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("clusters")]


@pytest.fixture(scope="module")
def ray_head():
    """One head for this module's tests (one xdist group), stopped after them: an idle head costs a fifth of a core."""
    head = RayHead().start()
    yield head
    head.close()


@pytest.fixture
def cluster(ray_head, transactional_db, admin_user):
    return Cluster.register({"name": "local", "address": ray_head.address, "python": PY}, admin_user)[0]


@pytest.fixture
def ray_recipe(recipe, tmp_path):
    return cluster_recipe(recipe, tmp_path, "ray", "local")


def test_a_launch_on_ray_is_submitted_with_its_run_variables_and_a_crash_fails_it_as_on_a_node(
        cluster, ray_recipe, reporting, follower, admin_user, ray_head):
    # A progress bar on stderr (carriage returns) between lines on stdout, then an exception: as a node shows them.
    ray_recipe("crashes", [PY, "-c", "import os, sys, time; print('job', os.environ['YARDSTICK_JOB_ID'], flush=True)\n"
                                     "for i in range(1, 38):\n"
                                     "    sys.stderr.write('\\r%3d%%|bar| %d/37' % (i * 100 // 37, i)); sys.stderr.flush()\n"
                                     "    time.sleep(0.01)\n"
                                     "sys.stderr.write('\\n'); print('saving', flush=True)\n"
                                     "raise ValueError('bad config: lr < 0')", "{job_dir}"])
    job = launch("crashes", admin_user)
    assert (job.status, job.launch.executor, job.launch.cluster_id) == (Status.QUEUED, "ray", cluster.pk)
    wait_for(lambda: job_of(job).status == Status.FAILED, 60, "the crashing Ray job to fail")
    job = job_of(job)
    launch_row = job.launch
    assert launch_row.remote_id == f"yardstick-job-{job.pk}-1" and launch_row.remote_status == "FAILED"
    first, *quoted = job.error.splitlines()
    assert first == "exited with status 1: ValueError: bad config: lr < 0", job.error
    assert quoted[0] != "" and quoted[-1] == "ValueError: bad config: lr < 0" and len(quoted) <= 10, quoted
    assert job.status_changes.last().reason == first and launch_row.exit_code == 1
    lines = list(OutputLine.objects.filter(job=job, stream="stdout").values_list("text", flat=True))
    assert f"job {job.pk}" in lines and "saving" in lines
    assert [t for t in lines if t.endswith("/37")] == ["100%|bar| 37/37"], "the bar at its last state, one line"
    assert launch_row.token.revoked, "its token dies with its Ray job"
    # What Ray was given: the argv as one safely quoted line, the run's variables, the stop wait, whose job it is.
    info = ray_head.client().get_job_info(launch_row.remote_id)
    variables = info.runtime_env["env_vars"]
    assert variables["YARDSTICK_JOB_ID"] == str(job.pk) and variables["MLFLOW_RUN_ID"] == job.run.run_id
    assert variables["RAY_JOB_STOP_WAIT_TIME_S"] == "3" and variables["MLFLOW_TRACKING_URI"] == reporting.url
    assert "DATABASE_URL" not in variables and "REDIS_URL" not in variables
    assert info.metadata["yardstick_job"] == str(job.pk)
    assert info.entrypoint.startswith(f"{PY} -c 'import os, sys, time;")
    assert launch_row.job_dir == f"{cluster.launches.get().definition['shared_dir']}/job-{job.pk}"


def test_the_clusters_page_lists_its_nodes_as_ray_reports_them_tied_to_yardstick_nodes(cluster, client, admin_user):
    from launch.views import cluster_detail
    from tests.dashboard.builders import node

    [head] = cluster_detail(cluster, nodes=True)["nodes"]
    ip = head["address"]  # this machine's own address, as Ray's head picked it
    assert head == {"name": ip, "address": ip, "alive": True, "head": True, "gpus": 0.0, "cpus": 2.0,
                    "yardstick_node": None, "measured": False}, "no agent reports from it yet"
    box = node("ray-box")
    box.labels = {"address": ip}
    box.save(update_fields=["labels"])
    assert cluster_detail(cluster, nodes=True)["nodes"][0]["yardstick_node"] == "ray-box"
    client.force_login(admin_user)
    html = client.get("/clusters/local").content.decode()
    assert f'<tr data-node="{ip}">' in html and '<a href="/nodes/ray-box">ray-box</a>' in html


def test_a_ray_job_on_a_node_no_agent_measures_costs_not_measured_on_its_page_and_in_the_api(
        cluster, ray_recipe, reporting, follower, admin_user, client):
    ray_recipe("quick", [PY, "-c", "print('done')"])
    job = launch("quick", admin_user)
    wait_for(lambda: job_of(job).status == Status.COMPLETED, 60, "the Ray job to complete")
    allocation = job_of(job).launch.allocation
    ip = allocation["hosts"][0]
    assert allocation["addresses"] == [ip] and allocation["yardstick_nodes"] == [None], allocation
    assert (allocation["cpus"], allocation["gpus"], allocation["node_count"]) == (1, 0, 1)
    assert allocation["start"] <= allocation["end"], "Ray's own times of its run"
    assert not Stint.objects.filter(job=job).exists()

    client.force_login(admin_user)
    money = client.get(f"/api/jobs/{job.pk}").json()["money"]
    why = (f"no Yardstick agent reports from ray node {ip}, where it ran: start one there (manage.py collect, or up "
           "--role collector) to measure what its jobs cost")
    assert (money["cost_usd"], money["state"], money["cost_title"]) == (None, "not measured", why)
    page = client.get(f"/jobs/{job.pk}").content.decode()
    assert f'id="job-cost"><span title="{why}">not measured</span>' in page
    assert f"Ray gave it 0 GPUs and 1 CPU on 1 node (<code>{ip}</code>)" in " ".join(page.split())


def test_an_operator_stops_a_ray_run_from_the_job_page_and_its_host_process_is_charged_to_it(  # noqa: F811
        cluster, ray_recipe, reporting, follower, admin_user, live_web, page, django_user_model, pg_dsn, tmp_path,
        settings, output_dir, request):
    from launch.kind import match_other_nodes

    settings.YARDSTICK_URL = live_web.url  # the run reports to the server the page is on
    ray_recipe("steps", [PY, STEPS, "--out", "{job_dir}", "--steps", "400", "--sleep", "0.3", "--busy",
                         "--ignore-stop"])
    user_in_role(django_user_model, "olga", "operator", subprocess=True)
    # (Playwright keeps an event loop in this thread: what publishes live events runs in a thread of its own.)
    job = in_thread(lambda: launch("steps", admin_user, name="on ray"))
    record_events(page)
    log_in(page, live_web.url, "olga", f"/jobs/{job.pk}")
    wait_subscribed(page)
    page.wait_for_selector("#output-lines .line:has-text('step 3')", timeout=60_000)
    assert job_of(job).launch.remote_status == "RUNNING"
    assert in_thread(Job.fail_crashed, 0) == [], "no worker beats for a Ray job: its follower reconciles it"
    # The node's agent, started while the run is busy: its scan a second after the first finds the run's process.
    agent = subprocess.Popen([PY, "-m", "collector.agent", "--dsn", pg_dsn, "--source", "host", "--interval", "1",
                              "--spool-dir", str(tmp_path / "spool")], env={**os.environ, "PYTHONUNBUFFERED": "1"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:

        # Ray names the node its driver runs on by IP, the agent by this host's name: tied by the address the agent
        # reports, the cpu recipe's job holds that node's host device, as on a node's launch worker.
        def charged():
            in_thread(match_other_nodes)
            return Stint.objects.filter(job=job, ended_at__isnull=True).first()

        stint = wait_for(charged, 60, "the job to hold the host device of the agent's node", every_s=1)
        assert (stint.node, stint.device, stint.pid) == (socket.gethostname(), "cpu", BOUND_PID), stint.to_dict()
        allocation = job_of(job).launch.allocation
        assert allocation["yardstick_nodes"] == [socket.gethostname()] != allocation["hosts"], allocation
        assert allocation["hosts"] == allocation["addresses"], "Ray names the node by its IP"
        # The agent sees the run's busy process with YARDSTICK_JOB_ID in its environment (what charges its processes
        # on other nodes): a process Ray started for this job, with the job's variables (its supervisor or the script).
        holder = wait_for(lambda: DeviceHolder.objects.filter(
            launcher_ids__contains={"YARDSTICK_JOB_ID": str(job.pk)}).first(), 60, "the job's holder", every_s=1)
        environ = open(f"/proc/{holder.pid}/environ", "rb").read().split(b"\0")
        assert f"YARDSTICK_JOB_ID={job.pk}".encode() in environ, open(f"/proc/{holder.pid}/cmdline").read()
        assert Stint.objects.filter(job=job).count() == 1, "no second stint of the device it holds"

        wait_for(lambda: job_of(job).steps_done >= 5, 60, "five steps")
        page.wait_for_function("Number(document.getElementById('steps-done').textContent) >= 5", timeout=30_000)
        shot(page, output_dir, request, "running")
        page.locator(f'[data-job-controls="{job.pk}"] .job-stop-form button').click()
        page.wait_for_selector("#job-status .status[data-status='stopped']", timeout=60_000)
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(15)
    job = job_of(job)
    assert job.launch.remote_status == "STOPPED" and job.launch.stop_step == "SIGTERM"
    reason = job.status_changes.last().reason
    assert reason == f"ray stopped its job 2 s after its stop flag (at step {job.steps_done}; ray says STOPPED)"
    said = output(job)
    assert "stop requested: the run's stop flag is set" in said and "ray stops its job (SIGTERM" in said
    assert f"ended stopped: {reason}" in said
    in_thread(match_other_nodes)
    assert not Stint.objects.filter(job=job, ended_at__isnull=True).exists(), "its stints end with it"
    shot(page, output_dir, request, "stopped")


def test_a_control_plane_restarted_mid_run_picks_its_ray_jobs_up_again(cluster, ray_recipe, reporting, follower,
                                                                       admin_user, ray_head):
    ray_recipe("short", [PY, STEPS, "--out", "{job_dir}", "--steps", "12", "--sleep", "0.25"])
    job = launch("short", admin_user)
    wait_for(lambda: job_of(job).steps_done >= 1, 60, "the first step")
    follower.stop()  # the control plane goes down; Ray runs on
    remote_id = job_of(job).launch.remote_id
    wait_for(lambda: ray_head.client().get_job_status(remote_id) == "SUCCEEDED", 60, "Ray to finish the job")
    assert job_of(job).status == Status.RUNNING, "nothing followed it meanwhile"
    follower.start()  # the control plane is back
    wait_for(lambda: job_of(job).status == Status.COMPLETED, 30, "the job to be reconciled")
    job = job_of(job)
    assert job.steps_done == 12 and "step 12" in output(job), "every line Ray kept is in its output"
    assert job.launch.checkpoints[-1] == "step_12" and job.checkpoint_step == 12

    # A job whose Ray job the cluster no longer knows fails, saying so.
    lost = launch("short", admin_user)
    wait_for(lambda: job_of(lost).launch.remote_status == "RUNNING", 60, "the second job to run")
    follower.stop()
    ray_head.client().stop_job(job_of(lost).launch.remote_id)
    Launch.objects.filter(pk=lost.pk).update(remote_id="yardstick-job-never-submitted")
    follower.start()
    wait_for(lambda: job_of(lost).status == Status.FAILED, 30, "the lost job to fail")
    assert "is gone from cluster local" in job_of(lost).error


def test_a_ray_run_stopped_at_its_flag_resumes_from_its_newest_checkpoint_on_the_shared_storage(
        cluster, ray_recipe, reporting, follower, admin_user):
    # 9 s for the run to see its flag: it asks every 3 s (a third of it; a minute's grace would ask every 10 s).
    ray_recipe("resumable", [PY, STEPS, "--out", "{job_dir}", "--steps", "30", "--sleep", "0.2"],
               resume_argv=["--from", "{checkpoint}"], stop_grace_s=[9, 3])
    job = launch("resumable", admin_user)
    wait_for(lambda: job_of(job).steps_done >= 3, 60, "three steps")
    job.request_stop(by="ada")
    wait_for(lambda: job_of(job).status == Status.STOPPED, 60, "the run to end itself at its stop flag")
    job = job_of(job)
    assert job.launch.remote_status == "SUCCEEDED" and job.launch.stop_step == "flag"
    stopped_at = job.steps_done
    assert job.status_changes.last().reason == (f"the run ended itself at its stop flag (at step {stopped_at}; ray "
                                                "says SUCCEEDED)")
    assert job.launch.checkpoints[-1] == f"step_{stopped_at}" and job.resume_refusal() == ""

    assert job.resume(by=admin_user)
    wait_for(lambda: job_of(job).status == Status.COMPLETED, 60, "the resumed run to complete")
    job = job_of(job)
    assert job.launch.remote_id == f"yardstick-job-{job.pk}-2" and job.launch.starts == 2
    assert job.launch.argv[-2:] == ["--from", f"{job.launch.job_dir}/step_{stopped_at}"]
    assert f"starting at step {stopped_at}" in output(job) and job.steps_done == 30


def test_a_cluster_that_stops_answering_leaves_its_job_running_raises_an_alert_and_is_followed_again(
        ray_head, ray_recipe, reporting, follower, admin_user):
    from alerts.evaluate import evaluate
    from alerts.models import Alert, AlertRule

    relay = Relay(socket.AF_INET, ("127.0.0.1", ray_head.dashboard_port)).restore()
    try:
        Cluster.register({"name": "local", "address": f"http://127.0.0.1:{relay.port}", "python": PY}, admin_user)
        AlertRule.objects.create(name="ray down", kind="cluster_unreachable", duration=0)
        ray_recipe("steady", [PY, STEPS, "--out", "{job_dir}", "--steps", "30", "--sleep", "0.3"])
        job = launch("steady", admin_user)
        wait_for(lambda: job_of(job).steps_done >= 1, 60, "the first step")
        relay.cut()
        wait_for(lambda: job_of(job).launch.unreachable_since is not None, 30, "the job to be marked unreachable")
        job = job_of(job)
        assert job.status == Status.RUNNING, "a cluster that does not answer is not a failed job"
        assert "cluster unreachable: ray cluster local" in output(job)
        assert Cluster.objects.get(name="local").unreachable_since is not None
        evaluate()
        alert = Alert.objects.get(rule__kind="cluster_unreachable")
        assert alert.subject == "cluster:local" and "ray cluster local" in alert.message
        assert "has not answered for 0 min (1 live job(s) on it)" in alert.message, alert.message
        relay.restore()
        wait_for(lambda: job_of(job).launch.unreachable_since is None, 30, "the cluster to answer again")
        assert "cluster local answers again" in output(job)
        evaluate()
        assert Alert.objects.get(pk=alert.pk).resolved_at is not None
        wait_for(lambda: job_of(job).status == Status.COMPLETED, 60, "the job to complete")
        assert job_of(job).steps_done == 30
    finally:
        relay.close()


def test_a_stop_ends_a_job_whose_cluster_stopped_answering_and_its_ray_job_is_stopped_once_it_answers(
        ray_head, ray_recipe, reporting, follower, admin_user, client):
    relay = Relay(socket.AF_INET, ("127.0.0.1", ray_head.dashboard_port)).restore()
    try:
        Cluster.register({"name": "local", "address": f"http://127.0.0.1:{relay.port}", "python": PY}, admin_user)
        ray_recipe("ignores", [PY, STEPS, "--out", "{job_dir}", "--steps", "400", "--sleep", "0.3", "--ignore-stop"])
        job = launch("ignores", admin_user)
        wait_for(lambda: job_of(job).steps_done >= 1, 60, "the first step")
        remote_id = job_of(job).launch.remote_id
        relay.cut()
        wait_for(lambda: job_of(job).launch.unreachable_since is not None, 30, "the job to be marked unreachable")
        client.force_login(admin_user)
        assert "cluster local not answering since" in client.get("/jobs").content.decode()
        job.request_stop(by="ada")
        wait_for(lambda: job_of(job).status == Status.STOPPED, 30, "the Stop to end the job after its graces (2 + 3 s)")
        job = job_of(job)
        assert "it may still run there" in job.status_changes.last().reason
        said = output(job)
        assert "stop requested: the run's stop flag is set" in said and "cannot be asked to stop its job" in said
        assert not Stint.objects.filter(job=job, ended_at__isnull=True).exists()
        assert ray_head.client().get_job_status(remote_id) == "RUNNING", "it ran on there, unstopped"
        relay.restore()
        wait_for(lambda: job_of(job).launch.unreachable_since is None, 30, "the cluster's word to be taken")
        assert "ray says its job still ran (RUNNING) after it ended here: ray stops it now" in output(job)
        wait_for(lambda: ray_head.client().get_job_status(remote_id) == "STOPPED", 30, "Ray to stop it")
        assert job_of(job).status == Status.STOPPED, "the job's own end stays"
    finally:
        relay.close()


def test_a_killed_head_makes_its_job_unreachable_then_failed_once_a_new_head_has_no_such_job(
        cluster, ray_recipe, reporting, follower, admin_user, ray_head):
    # Last in this module: it restarts the shared head.
    ray_recipe("long", [PY, STEPS, "--out", "{job_dir}", "--steps", "400", "--sleep", "0.3"])
    job = launch("long", admin_user)
    wait_for(lambda: job_of(job).steps_done >= 1, 60, "the first step")
    ray_head.stop()
    wait_for(lambda: job_of(job).launch.unreachable_since is not None, 30, "the job to be marked unreachable")
    assert job_of(job).status == Status.RUNNING
    ray_head.start()
    wait_for(lambda: job_of(job).status == Status.FAILED, 60, "the job the new head does not know to fail")
    job = job_of(job)
    assert f"its ray job yardstick-job-{job.pk}-1 is gone from cluster local" in job.error
    assert "cluster local answers again" in output(job)


def test_a_sweep_runs_its_trials_on_ray_one_after_the_other(cluster, ray_recipe, reporting, follower, operator):
    from sweeps.figures import summary
    from sweeps.models import State, Sweep

    ray_recipe("surface-ray", [PY, "{yardstick}/tests/sweeps/surface_script.py", "--x", "{x}", "--steps", "{steps}"],
               params=[{"name": "x", "kind": "float", "default": 0.5, "minimum": 0.0, "maximum": 1.0},
                       {"name": "steps", "kind": "integer", "default": 3, "minimum": 1, "maximum": 10}],
               score_key="score")
    sweep = in_thread(lambda: Sweep.create(created_by=operator, name="on ray", team="research", recipe="surface-ray",
                                           space={"x": {"low": 0.0, "high": 1.0}}, budget_usd="5", parallel=1,
                                           max_trials=2))
    assert sweep.trials.count() == 1, "one at once"
    wait_for(lambda: in_thread(sweep.advance) is not None and Sweep.objects.get(pk=sweep.pk).state == State.ENDED,
             90, "both trials to run on Ray and the sweep to end")
    trials = list(sweep.trials.select_related("job__launch").order_by("number"))
    assert [t.params for t in trials][0] == {"x": 0.5} and len(trials) == 2
    for t in trials:
        assert (t.job.status, t.job.launch.executor, t.job.launch.remote_status) == (Status.COMPLETED, "ray", "SUCCEEDED")
        assert sorted(t.job.steps.values_list("step", flat=True)) == [0, 1, 2, 3]
    s = in_thread(lambda: summary(sweep))
    # A Ray node no agent measures: its trials' cost is no figure, the sweep's dollars are what was measured (none).
    assert [r["cost_display"] for r in s["trials"]] == ["not measured", "not measured"] and s["spent_usd"] == "0.00"
    assert Sweep.objects.get(pk=sweep.pk).reason == "all 2 trials started"

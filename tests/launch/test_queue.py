"""The line of launches waiting for GPUs and its placer (trainer/queue.py), on the real database: workers as they
report themselves, jobs as `start` makes them; nothing is sent (no commit in a db test), so what the placer gives is
read from the rows. A job ends as a worker ends it (Job.finish), which frees what it held for the next pass."""

import sys

import pytest

from launch.kind import start
from launch.models import Launch
from trainer.models import Job, Status, TeamCap, Worker
from trainer.queue import place_waiting, set_cap, set_priority, summary
from yardstick.inputs import InputError

PY = sys.executable
H100 = [{"index": i, "uuid": f"GPU-33333333-cccc-4000-8000-00000000000{i}", "name": "NVIDIA H100",
         "memory_mib": 81920} for i in range(2)]


@pytest.fixture
def two_gpus(db, recipe):
    """A node's launch worker with two GPUs, a 1-GPU and a 2-GPU recipe."""
    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu"], cores=8, gpus=H100)
    recipe("one", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1})
    recipe("two", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 2})


def run(recipe_name, user, **fields):
    fields.setdefault("team", "research")
    return start(recipe=recipe_name, created_by=user, **fields)


def end(job):
    """The job's worker claims and ends it (what it held is free); then the placer's pass, as after a commit."""
    job = Job.objects.get(pk=job.pk)
    assert job.claim() and job.finish(Status.COMPLETED)
    return place_waiting()


def line():
    return list(Job.objects.filter(status=Status.QUEUED, placed_at__isnull=True).order_by("line_place")
                .values_list("pk", "line_place"))


def gpus(job):
    return Launch.objects.get(pk=job.pk).gpus


def test_the_third_waits_1st_in_line_and_gets_the_gpu_the_first_frees(two_gpus, operator):
    first, second, third = (run("one", operator) for _ in range(3))

    assert (gpus(first), gpus(second), gpus(third)) == ([0], [1], [])
    assert line() == [(third.pk, 1)]
    assert third.waiting_for == ("waiting for 1 × GPU in the shared pool: 1st in line (every GPU that would do is "
                                 "held)")
    assert end(first).placed == [third] and gpus(third) == [0] and line() == []
    third.refresh_from_db()
    assert third.placed_on == "launch@gpu-a" and third.status_note == "" and third.waited_s() >= 0


def test_the_queue_panel_counts_a_placed_job_not_yet_started_apart_from_the_running_ones(two_gpus, operator, client):
    """The walk's "Running 2" with one job running and one placed on its worker but not started."""
    first, second, third = (run("one", operator) for _ in range(3))
    assert Job.objects.get(pk=first.pk).claim(), "its worker started it"
    shared = summary()["pools"][0]
    assert (shared["running"], shared["starting"], len(shared["waiting"])) == (1, 1, 1)
    client.force_login(operator)
    assert client.get("/api/queue").json()["pools"][0]["starting"] == 1
    panel = client.get("/jobs").content.decode().split('id="queue-table"')[1].split("</table>")[0]
    running = panel.split('class="num queue-running">')[1].split("</td>")[0]
    assert running.startswith("1 ") and "+1 starting" in running


def test_a_high_priority_launch_overtakes_a_normal_one_and_only_an_admin_may_ask_for_high(two_gpus, operator,
                                                                                          admin_user):
    running = [run("one", operator) for _ in range(2)]
    normal = run("one", operator)
    with pytest.raises(InputError) as refused:
        run("one", operator, priority="high")
    assert (refused.value.field, refused.value.message) == ("priority", "priority high is for admins; choose low or "
                                                                        "normal")
    with pytest.raises(InputError, match=r"^priority must be one of low, normal, high; got 'urgent'$"):
        run("one", admin_user, priority="urgent")
    low = run("one", operator, priority="low")
    high = run("one", admin_user, priority="high")

    assert line() == [(high.pk, 1), (normal.pk, 2), (low.pk, 3)]
    assert end(running[0]).placed == [high]
    assert end(running[1]).placed == [normal]
    assert line() == [(low.pk, 1)]


def test_a_waiting_jobs_priority_changes_its_place_and_a_placed_jobs_cannot(two_gpus, operator, admin_user):
    running = run("one", operator)
    run("one", operator)
    first, second = run("one", operator), run("one", operator)

    set_priority(second, "high", by=admin_user)
    assert line() == [(second.pk, 1), (first.pk, 2)]
    with pytest.raises(InputError, match=rf"^job {running.pk} is queued, not waiting in line"):
        set_priority(running, "low")
    with pytest.raises(InputError, match="^priority must be one of low, normal, high; got 7$"):
        set_priority(first, 7)
    with pytest.raises(InputError, match="^priority high is for admins; choose low or normal$"):
        set_priority(first, "high", by=operator)
    assert line() == [(second.pk, 1), (first.pk, 2)]


def test_a_2_gpu_job_is_not_starved_by_a_stream_of_1_gpu_jobs(two_gpus, operator):
    a, b = run("one", operator), run("one", operator)
    big = run("two", operator)
    small = run("one", operator)  # behind the big one: it may not take a GPU the big one waits for

    assert line() == [(big.pk, 1), (small.pk, 2)]
    assert end(a).placed == [], "the freed GPU is held back for the 2-GPU job, first in line"
    assert gpus(small) == []
    assert end(b).placed == [big] and gpus(big) == [0, 1]
    assert line() == [(small.pk, 1)]
    assert end(big).placed == [small]


def test_a_team_cap_holds_the_teams_second_job_while_another_teams_job_runs(two_gpus, operator):
    set_cap("research", "cuda", 1, by="ada")
    first = run("one", operator)
    capped = run("one", operator)
    other = run("one", operator, team="infra")

    assert (gpus(first), gpus(capped), gpus(other)) == ([0], [], [1])
    assert capped.waiting_for == ("waiting for 1 × GPU in the shared pool: 1st in line (team research holds 1 of "
                                  "its cap of 1 GPU)")
    assert end(other).placed == [], "a free GPU, but the team is at its cap"
    assert end(first).placed == [capped]
    set_cap("research", "cuda", "", by="ada")
    assert not TeamCap.objects.exists()


@pytest.mark.parametrize("devices, kind, why", [
    (-1, "cuda", "devices must be a whole number from 0 to 100000 (empty: no cap), got -1"),
    ("two", "cuda", "devices must be a whole number from 0 to 100000 (empty: no cap), got 'two'"),
    (True, "cuda", "devices must be a whole number from 0 to 100000 (empty: no cap), got True"),
    (1.5, "cuda", "devices must be a whole number from 0 to 100000 (empty: no cap), got 1.5"),
    (1, "tpu", "kind must be cuda (GPUs) or cpu (cores), got 'tpu'"),
    (1, [], "kind must be cuda (GPUs) or cpu (cores), got []"),
])
def test_a_bad_cap_is_refused_naming_the_field_and_keeps_the_old_one(db, devices, kind, why):
    set_cap("research", "cuda", 2)
    with pytest.raises(InputError) as refused:
        set_cap("research", kind, devices)
    assert refused.value.message == why
    assert list(TeamCap.objects.values_list("team", "kind", "devices")) == [("research", "cuda", 2)]


def test_a_job_cancelled_while_waiting_leaves_the_line_and_the_next_moves_up(two_gpus, operator):
    run("one", operator), run("one", operator)
    first, second = run("one", operator), run("one", operator)

    assert first.request_stop(by="ada")
    first.refresh_from_db()
    assert first.status == Status.STOPPED and first.status_changes.last().reason == "cancelled before it started by ada"
    place_waiting()
    assert line() == [(second.pk, 1)]


def test_a_resumed_job_waits_in_line_on_the_node_that_holds_its_checkpoints(db, recipe, operator):
    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu"], cores=8, gpus=H100[:1])
    Worker.report("launch@gpu-b", "gpu-b", ["launch@gpu-b"], ["cpu"], cores=8, gpus=H100[:1])
    recipe("one", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1}, resume_argv=["--from", "{checkpoint}"])
    job = run("one", operator)
    node = Launch.objects.get(pk=job.pk).node
    assert job.claim() and job.finish(Status.STOPPED)
    Launch.objects.filter(pk=job.pk).update(checkpoints=["step_3"])
    other = run("one", operator, node=node)  # takes the GPU of the node the checkpoints are on

    assert Job.objects.get(pk=job.pk).resume(by="ada")
    job.refresh_from_db()
    assert job.in_line and job.waiting_for == (f"waiting for 1 × GPU on node {node} in the shared pool: 1st in line "
                                               "(every GPU that would do is held)")
    assert end(other).placed == [job] and Launch.objects.get(pk=job.pk).worker == f"launch@{node}"


@pytest.fixture
def one_node_two_workers(db, recipe):
    """A node's jobs worker and launch worker, both seeing its two GPUs (torch's cuda:0 and cuda:1, NVML's 0 and 1)."""
    for name in ("jobs@gpu-a", "launch@gpu-a"):
        Worker.report(name, "gpu-a", [name, "jobs"] if name.startswith("jobs") else [name],
                      ["cpu", "cuda:0", "cuda:1"], cores=8, gpus=H100)
    recipe("one", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1})


def builtin(user, **fields):
    return Job.start(name="grpo", team="research", env="arithmetic", config={"steps": 2}, created_by=user, **fields)


def test_a_built_in_job_and_a_launch_never_share_a_gpu_of_their_node(one_node_two_workers, operator):
    trainer = builtin(operator)  # device auto on a node with GPUs: a GPU job, from the line
    launched = run("one", operator)
    waits = run("one", operator)
    named = builtin(operator, device="cuda:1")

    assert (trainer.gpus, trainer.placed_on, gpus(launched)) == ([0], "jobs@gpu-a", [1])
    assert [pk for pk, _ in line()] == [waits.pk, named.pk]
    assert named.waiting_for == ("waiting for GPU 1 in the shared pool: 2nd in line (every GPU that would do is "
                                 "held)")
    assert end(launched).placed == [waits], "the launch first in line takes GPU 1, named or not"
    assert gpus(waits) == [1]
    assert end(waits).placed == [named]
    named.refresh_from_db()
    assert named.gpus == [1] and named.placed_on == "jobs@gpu-a"
    assert end(trainer).placed == [] and line() == []


def test_a_built_in_job_on_cpu_is_not_in_the_line(one_node_two_workers, operator):
    job = builtin(operator, device="cpu")
    assert not job.in_line and job.gpus == [] and job.waited_s() == 0


def test_waits_by_team_in_the_cost_review_are_the_figures_by_hand_beside_the_cap(two_gpus, recipe, operator,
                                                                                   admin_user, client):
    from datetime import timedelta

    from django.utils import timezone

    set_cap("research", "cuda", 1, by="ada")
    jobs = [run("one", operator, team="research") for _ in range(5)] + [run("one", operator, team="infra")]
    cancelled = run("one", operator, team="research")
    Job.objects.filter(pk=cancelled.pk).update(status=Status.STOPPED)  # left the line before its turn: not counted
    recipe("on-cpu", [PY, "-c", "pass"], devices={"kind": "cpu", "count": 1})
    on_cpu = [run("on-cpu", operator, team="research") for _ in range(3)]  # a cpu launch shares cores: no wait here
    assert all(Job.objects.get(pk=j.pk).queued_at is not None for j in on_cpu)
    now = timezone.now()
    # Waits of 10, 20, 30 and 100 s, and one still waiting for 50 s so far; infra's never waited.
    for job, waited in zip(jobs, (10, 20, 30, 100, None)):
        joined = now - timedelta(seconds=200 if waited else 50)
        Job.objects.filter(pk=job.pk).update(status=Status.COMPLETED if waited else Status.QUEUED, queued_at=joined,
                                             placed_at=joined + timedelta(seconds=waited) if waited else None)

    from trainer.queue import waits

    by_team = {w["team"]: w for w in waits(now - timedelta(hours=1), now + timedelta(seconds=1), now=now)}
    research = by_team["research"]
    assert (research["jobs"], research["waiting_now"], research["median_s"], research["p90_s"],
            research["longest_s"]) == (5, 1, 30, 100, 100), research
    assert [c["devices"] for c in research["caps"]] == [1]
    assert (by_team["infra"]["jobs"], by_team["infra"]["median_s"]) == (1, 0.0)

    client.force_login(admin_user)
    html = client.get("/costs").content.decode()
    row = html[html.index('<tr data-team="research">'):]
    row = row[:row.index("</tr>")]
    assert '<td class="num wait-median">30 s</td>' in row and '<td class="num wait-p90">100 s</td>' in row, row
    assert "1\n        GPU" in row


def test_an_alert_fires_for_a_job_queued_longer_than_its_rule_says_and_resolves_when_it_starts(two_gpus, operator):
    from datetime import timedelta

    from django.utils import timezone

    from alerts.evaluate import evaluate
    from alerts.models import Alert, AlertRule

    running = [run("one", operator) for _ in range(2)]
    waits_ = run("one", operator)
    AlertRule.objects.create(name="queued", kind="queued_long", duration=5)
    evaluate()
    assert not Alert.objects.exists(), "waiting less than 5 minutes"
    Job.objects.filter(pk=waits_.pk).update(queued_at=timezone.now() - timedelta(minutes=6))
    evaluate()
    alert = Alert.objects.get()
    assert alert.subject == f"job:{waits_.pk}" and alert.message.startswith(
        f"job {waits_.pk} 'one' (research) has waited 6 min in the line: waiting for 1 × GPU in the shared pool: 1st")
    assert end(running[0]).placed == [waits_]
    evaluate()
    assert Alert.objects.get().resolved_at is not None


def test_a_built_in_auto_job_in_line_keeps_waiting_for_gpus_when_the_gpu_workers_go_away(one_node_two_workers,
                                                                                         operator):
    from datetime import timedelta

    from django.utils import timezone

    held = [builtin(operator) for _ in range(2)]
    waits = builtin(operator)  # auto, where a jobs worker has GPUs: in the line for one
    assert [j.gpus for j in held] == [[0], [1]] and waits.in_line
    Worker.objects.update(seen_at=timezone.now() - timedelta(hours=1))

    place_waiting()
    waits.refresh_from_db()
    assert waits.in_line and waits.waiting_for == ("waiting for 1 × GPU in the shared pool: 1st in line (no live "
                                                   "worker serves it now)")


def test_a_resumed_built_in_gpu_job_waits_in_the_line_and_says_why_while_the_gpus_are_held(one_node_two_workers,
                                                                                           operator):
    trainer = builtin(operator)
    assert trainer.gpus == [0] and trainer.claim() and trainer.finish(Status.STOPPED)
    holders = [run("one", operator) for _ in range(2)]
    assert [gpus(j) for j in holders] == [[0], [1]]
    trainer.refresh_from_db()
    assert trainer.resume_refusal() == "", "a Resume can help: it waits in the line"

    assert trainer.resume(by="ada")
    trainer.refresh_from_db()
    assert trainer.in_line and trainer.placed_on == "" and trainer.waiting_for.startswith(
        "waiting for 1 × GPU in the shared pool: 1st in line")
    assert end(holders[1]).placed == [trainer]
    trainer.refresh_from_db()
    assert trainer.gpus == [1] and trainer.placed_on == "jobs@gpu-a"


def test_a_launch_whose_gpus_are_held_is_not_refused_a_resume_it_waits(two_gpus, recipe, operator):
    recipe("resumable", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1}, resume_argv=["{checkpoint}"])
    job = run("resumable", operator)
    assert job.claim() and job.finish(Status.FAILED, error="boom")
    Launch.objects.filter(pk=job.pk).update(checkpoints=["step_3"])
    run("one", operator), run("one", operator)
    job.refresh_from_db()
    assert job.resume_refusal() == "" and job.resume(by="ada")
    job.refresh_from_db()
    assert job.in_line and job.line_place == 1

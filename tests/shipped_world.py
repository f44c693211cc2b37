"""A database holding what the product ships and every state a user can reach, for tests that walk every URL on it.

Tests that build their own fixtures miss what the shipped data breaks (the Jobs page answered 500 once the example
recipes were imported, with every test green). `seed()` imports launch/examples/recipes.yaml and puts beside it: a
priced node with telemetry and a live worker, a launched job in every status on a node, on a Ray cluster that
stopped answering (on a node no agent measures) and on a Slurm cluster (with what each scheduler says, an allocation, output lines and a
traceback), built-in and outside runs, a campaign of launched runs with an evaluation job, a running sweep with its
trials in the line and a stopped one, alert rules of every kind
with a firing alert, and a channel. Each row goes in through the code that owns it where that code needs no running
process (a worker's claim and finish, Recipe import, Campaign.create_launched, Sweep.create, AlertRule.create); what only a
running process would write (a scheduler's word, an exit status, output lines) is written as it would write it.
"""

from datetime import datetime, timedelta, timezone

import yaml

from tests.conftest import ROOT
from tests.dashboard import builders as b

UTC = timezone.utc
GPUS = [{"index": i, "uuid": f"GPU-gpu-a-{i}", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559} for i in (0, 1)]
TRACEBACK = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "    main()", "ValueError: batch_size 7 is not a multiple of num_generations 4"]


def seed(admin, operator):
    """Fill the database as above; return {"jobs": {label: job id}, "recipes", "clusters", "nodes", "devices",
    "campaigns", "sweeps", "deployments", "alerts", "rules", "runs", "experiments"} (the ids and names its URLs take)."""
    from alerts.models import Alert, AlertRule, Channel
    from campaigns.models import Campaign
    from launch import kind
    from launch.models import Cluster, Launch, OutputLine, Recipe, import_all
    from serving.models import Deployment
    from sweeps.models import Sweep
    from tracking import store
    from tracking.models import Run
    from trainer.models import Job, Status, Worker

    now = datetime.now(UTC)
    start = b.floor_minute(now) - timedelta(minutes=30)
    b.prices(per_hour="3.60", per_kwh="0.10", pue="1.5")
    node = b.node("gpu-a", team="infra")
    devices = [b.device(node, 0), b.device(node, 1, source="sim", simulated=True)]
    for d in devices:
        b.minutes(d, start, 20, power_w=400)
        b.latest(d, 80.0, 400.0)
    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu", "cuda:0", "cuda:1"], cores=16, gpus=GPUS)
    Worker.report("jobs@gpu-a", "gpu-a", ["jobs", "jobs@gpu-a"], ["cpu", "cuda:0", "cuda:1"], cores=16, gpus=GPUS)

    import_all(yaml.safe_load((ROOT / "launch" / "examples" / "recipes.yaml").read_text()), admin)
    ray = Cluster.objects.create(name="ray-a", kind="ray", address="http://127.0.0.1:9", created_by=admin,
                                 answered_at=now - timedelta(minutes=20), unreachable_since=now - timedelta(minutes=15),
                                 error="connection refused")
    slurm = Cluster.objects.create(name="hpc", kind="slurm", address=str(ROOT / "tests" / "no-such-slurm.conf"),
                                   created_by=admin, answered_at=now)

    jobs = {}

    def launched(label, recipe, status, cluster=None, **launch):
        """A launch of `recipe` moved to `status` as its worker (or follower) would move it."""
        job = kind.start(recipe=recipe, params={}, name=label, team="research", created_by=operator,
                         cluster=cluster.name if cluster else None)
        job = Job.objects.get(pk=job.pk)
        if status != Status.QUEUED:
            assert job.claim(), label
            job = Job.objects.get(pk=job.pk)
        if status == Status.STOPPING:
            job.request_stop(by=operator)
        elif status not in (Status.QUEUED, Status.RUNNING):
            job.finish(status, f"seeded {status}", error="\n".join(TRACEBACK) if status == Status.FAILED else "")
        Launch.objects.filter(pk=job.pk).update(**launch)
        OutputLine.objects.bulk_create([
            OutputLine(job=job, seq=i + 1, stream="stderr" if status == Status.FAILED else "stdout", text=text, at=now)
            for i, text in enumerate(["started: python train.py --name 'two words'", "step 1", *(
                TRACEBACK if status == Status.FAILED else [])])])
        Launch.objects.filter(pk=job.pk).update(output_seq=2 + (len(TRACEBACK) if status == Status.FAILED else 0))
        jobs[label] = job.pk
        return job

    ended = {"exit_code": 0, "stop_step": "", "checkpoints": ["checkpoint-10"], "job_dir": "/tmp/seeded",
             "node": "gpu-a"}
    for status in Status.values:
        extra = {} if status in (Status.QUEUED, Status.RUNNING, Status.STOPPING) else dict(ended)
        if status == Status.FAILED:
            extra.update(exit_code=1, checkpoints=[])
        if status == Status.STOPPED:
            extra.update(stop_step="SIGKILL", exit_code=-9)
        launched(f"node {status}", "plain-script", status, **extra)
        launched(f"ray {status}", "verl-grpo-ray", status, cluster=ray, executor="ray",
                 remote_id=f"raysubmit_{status}", remote_status={"queued": "", "running": "RUNNING"}.get(status, "FAILED")
                 if status != Status.COMPLETED else "SUCCEEDED",
                 unreachable_since=now - timedelta(minutes=15) if status in (Status.RUNNING, Status.STOPPING) else None,
                 remote_message="Job entrypoint command failed with exit code 1" if status == Status.FAILED else "",
                 # Ray names its node by IP, and no agent reports from it: its cost is "not measured".
                 allocation=None if status == Status.QUEUED else {
                     "nodes": "10.1.2.3", "hosts": ["10.1.2.3"], "node_count": 1, "gpus": 0, "cpus": 1,
                     "yardstick_nodes": [None], "start": (now - timedelta(minutes=10)).isoformat(),
                     "end": None if status in (Status.RUNNING, Status.STOPPING) else now.isoformat()})
        launched(f"slurm {status}", "nemo-rl-grpo-math-slurm", status, cluster=slurm, executor="slurm",
                 remote_id=str(100 + len(jobs)), remote_status="PENDING" if status == Status.QUEUED else "TIMEOUT"
                 if status == Status.FAILED else "RUNNING", remote_message="Resources" if status == Status.QUEUED else "",
                 allocation=None if status == Status.QUEUED else {
                     "nodes": "gpu-a", "hosts": ["gpu-a"], "node_count": 1, "gpus": 1, "cpus": 4, "yardstick_nodes": ["gpu-a"],
                     "start": (now - timedelta(minutes=10)).isoformat(),
                     "end": None if status in (Status.RUNNING, Status.STOPPING) else now.isoformat()})
    trl = launched("trl cuda", "trl-grpo", Status.COMPLETED, **ended)
    b.steps(trl, 10, start=start, every_s=60)
    b.stint(trl, devices[0], start, start + timedelta(minutes=10))
    Job.objects.filter(pk=trl.pk).update(checkpoint_step=10)
    evaluation = kind.start(recipe="eval-checkpoint", params={}, name="eval of trl", team="research",
                            created_by=operator, init_from=trl.pk)
    jobs["eval"] = evaluation.pk
    for label in ("node stopped", "node completed"):
        Job.objects.filter(pk=jobs[label]).update(checkpoint_step=10)

    builtin = b.job(name="built-in", team="research", status="completed", created_by=operator)
    b.steps(builtin, 10, start=start, every_s=60)
    b.stint(builtin, devices[1], start, start + timedelta(minutes=10))
    jobs["built-in"] = builtin.pk
    jobs["built-in queued"] = b.job(name="built-in queued", status="queued", created_by=operator).pk
    experiment = store.create_experiment("outside-gsm8k")
    run = store.create_run(experiment.pk, run_name="outside run", tags=[{"key": "yardstick.team", "value": "search"}])
    store.log_batch(run.run_id, metrics=[{"key": "eval/pass1", "value": 31.0, "timestamp": 1, "step": 1}],
                    params=[{"key": "max_steps", "value": "20"}])
    jobs["outside"] = run.job_id
    b.attribute(now)

    campaign = Campaign.create_launched(
        name="trl loop", team="research", envs=["arithmetic"], schedule=None, budget_usd="50", run_recipe="trl-grpo",
        continue_recipe="trl-grpo-continue", run_params={}, eval_recipes={"arithmetic": "eval-checkpoint"},
        loop=False, created_by=admin, ignored={})
    campaign.add_run(trl)
    campaign.add_run(Job.objects.get(pk=jobs["ray completed"]))  # a run nothing measured
    campaign.add_run(Job.objects.get(pk=evaluation.pk), role="eval")

    sweeps = [Sweep.create(created_by=operator, name="lr hunt", team="research", recipe="trl-grpo",
                           space={"learning_rate": {"low": 1e-6, "high": 1e-3, "log": True},
                                  "num_generations": {"choices": [4, 8]}},
                           objective="front", budget_usd="20", parallel=2, max_trials=6),
              Sweep.create(created_by=operator, name="to 50", team="search", recipe="builtin-grpo",
                           space={"lr": {"low": 1e-5, "high": 1e-2, "log": True}}, objective="cheapest", target_score=50,
                           budget_usd="5")]
    sweeps[1].stop(by=operator.username)

    channel = Channel.create(name="ops hook", kind="webhook", target="http://127.0.0.1:9/hook")
    rules = [AlertRule.create({"name": f"every {kind_}", "kind": kind_, "channels": [channel.pk]}, by=admin)
             for kind_ in ("job_failed", "cluster_unreachable", "gpu_idle", "node_stale", "device_unhealthy")]
    alert = Alert.fire(rules[1], "cluster:ray-a", 15.0, "cluster ray-a has not answered for 15 minutes", now)
    Deployment.register({"name": "llama-8b", "team": "serve", "engine": "vllm", "node": "gpu-a",
                         "metrics_url": "http://127.0.0.1:9/metrics", "model": "meta-llama/Llama-3.1-8B-Instruct"}, admin)
    b.attribute(now)
    return {"jobs": jobs, "deployments": ["llama-8b"], "recipes": list(Recipe.objects.values_list("name", flat=True)),
            "clusters": ["ray-a", "hpc"], "nodes": ["gpu-a"], "devices": [d.uuid for d in devices],
            "campaigns": [campaign.pk], "sweeps": [sw.pk for sw in sweeps], "alerts": [alert.pk] if alert else [], "rules": [r.pk for r in rules],
            "runs": list(Run.objects.values_list("run_id", flat=True)), "experiments": [experiment.pk]}

"""A sweep of the built-in trainer (the shipped builtin-grpo recipe, launch/examples/builtin_grpo.py) on arithmetic,
over `lr` on a log scale and `kl_coef`, on a real launch worker: its trials are real GRPO runs of a tiny base policy,
through the line; the one whose learning rate wrecks the policy is stopped by the sweep at its dollars, and the
sweep's dollars are its trials' to the micro-dollar.

Each trial waits after each evaluation (tests/sweeps/gated_builtin.py) while the test charges it a known price per
step (tests/sweeps/bill.py) and the sweep takes a pass, so it is judged at known dollars whatever the machine's
speed. Nothing here depends on the exact scores the trials reach: PyTorch's CPU kernels round differently on AVX2
and AVX-512 machines, and a GRPO run carries the difference on, so which of two sound learning rates ends higher is
not the same on every machine (docs/development.md, "Claims about learning"). What holds everywhere, with a wide
margin, is that a learning rate of 7e-3 takes this policy from about 44 points to under 30 within four steps while
the others stay near where they began. That the search finds better parameters than the defaults is asserted on a
surface known in advance (tests/sweeps/test_sweep_run.py)."""

import json
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from costs.intelligence import jobs_money
from sweeps.figures import summary
from sweeps.models import State, Sweep
from tests.sweeps.bill import MINUTE_USD, prices
from tests.sweeps.driving import drive
from trainer.models import Status

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
GATED = str(Path(__file__).with_name("gated_builtin.py"))
STEPS = 16
# Seed 12 draws, after trial 0 at the recipe's defaults (lr 5e-4, kl_coef 0.02): lr 1.8e-4, then 7.3e-3 (a learning
# rate that takes this policy's pass@1 from 44 to under 30 within four steps).
SEED = 12


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A base-policy cache holding a small arithmetic policy (two layers, 64 wide, pass@1 44 on the sweep's
    evaluation), pretrained on one thread as the trials run: the same weights on every run."""
    import torch

    from trainer.rl.model import GPTConfig
    from trainer.rl.pretrain import pretrain

    path, threads = tmp_path_factory.mktemp("base"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pretrain("arithmetic", path, "cpu", model_config=GPTConfig(n_layer=2, n_head=2, n_embd=64), max_steps=800,
                 batch_size=32, target_pass1=101.0, probe_every=1000, probe_size=4)
    finally:
        torch.set_num_threads(threads)
    return path


@pytest.fixture
def builtin(recipe, launch_worker, tiny_base, tmp_path):
    """The shipped builtin-grpo recipe, its script gated, on that base and the CPU; stop graces of 3 s and 2 s, so it
    asks for its stop flag every second."""
    shipped = next(r for r in yaml.safe_load((ROOT / "launch/examples/recipes.yaml").read_text())["recipes"]
                   if r["name"] == "builtin-grpo")
    gate = tmp_path / "gate"
    gate.mkdir()
    argv = [shipped["argv"][0], GATED, "--gate", str(gate), *shipped["argv"][2:], "--base_dir", str(tiny_base),
            "--device", "cpu", "--config", "eval_size=64"]
    # Without its shared setup (the base build, which the fixture made): test_sweep_run.py has a sweep's setup.
    fields = {k: v for k, v in shipped.items() if k not in ("name", "argv", "env", "stop_grace_s", "setup")}
    recipe("builtin-grpo", argv, **fields, env={"OMP_NUM_THREADS": "1"}, stop_grace_s=[3, 2])
    prices()
    return gate


def test_a_sweep_of_the_builtin_trainer_stops_a_hopeless_lr_and_counts_its_dollars(
        builtin, operator, client):
    client.force_login(operator)
    body = {"name": "lr and kl", "team": "research", "recipe": "builtin-grpo",
            "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "kl_coef": {"low": 0.0, "high": 0.2}},
            "params": {"steps": STEPS, "eval_every": 4, "checkpoint_every": STEPS, "prompts_per_step": 32,
                       "group_size": 8, "seed": 0},
            "objective": "per_dollar", "budget_usd": "10", "parallel": 2, "max_trials": 3, "seed": SEED,
            "stop_min_trials": 2}
    resp = client.post("/api/sweeps", json.dumps(body), content_type="application/json")
    assert resp.status_code == 201, resp.content
    sweep = Sweep.objects.get(pk=resp.json()["id"])
    first = list(sweep.trials.select_related("job").order_by("number"))
    assert [t.params for t in first] == [{"lr": 0.0005, "kl_coef": 0.02}, first[1].params]
    assert all(t.job.queued_at for t in first), "through the line"

    drive(sweep, builtin, lambda s: s.state == State.ENDED, timeout_s=180, in_order=True)
    trials = list(sweep.trials.select_related("job").order_by("number"))
    assert len(trials) == 3, [(t.number, t.params, t.job.status) for t in trials]
    hopeless = [t for t in trials if t.params["lr"] > 5e-3]
    assert hopeless, [t.params for t in trials]
    for t in hopeless:
        assert t.job.status == Status.STOPPED and t.stopped_reason.startswith("stopped by the sweep: "), (
            t.number, t.job.status, t.stopped_reason, list(t.job.output_lines.values_list("text", flat=True))[-5:])
        assert t.job.stop_reason == t.stopped_reason
    money = jobs_money([t.job_id for t in trials])
    full = STEPS * MINUTE_USD
    for t in trials:
        charged = Decimal(money[t.job_id]["cost_usd"])
        if t in hopeless:
            assert charged < full, "stopped early, charged what it ran"
        elif t.job.status == Status.COMPLETED:
            assert charged == full
    s = summary(sweep)
    assert Decimal(s["spent_usd"]) == sum((Decimal(money[t.job_id]["cost_usd"]) for t in trials), Decimal(0))
    # The defaults' trial ran all its steps, and the best points per dollar is a trial that was not stopped: a
    # stopped trial's score fell where the others' held.
    rows = {r["number"]: r for r in s["trials"]}
    assert rows[0]["status"] == Status.COMPLETED, s["trials"]
    assert s["best"]["per_dollar"] not in {t.number for t in hopeless}, s["trials"]

"""The job's phase: what the worker is doing, above all the base-policy build of an environment's first job."""

import functools
import importlib
import re

import pytest

from tests.trainer.helpers import run_collecting
from trainer import runner
from trainer.models import Job

# The module, not the `pretrain` function trainer.rl exports under the same name.
pretrain = importlib.import_module("trainer.rl.pretrain")


@pytest.fixture
def bare_data_dir(settings, tmp_path, monkeypatch):
    """A data dir with no base policy yet; the build is made tiny (one layer, 40 steps) but runs for real."""
    from trainer.rl.model import GPTConfig

    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    monkeypatch.setattr(runner, "PHASE_EVERY_S", 0.0)
    real = pretrain.ensure_base_checkpoint
    monkeypatch.setattr(pretrain, "ensure_base_checkpoint", functools.partial(
        real, model_config=GPTConfig(n_layer=1, n_head=2, n_embd=32), max_steps=40, batch_size=16,
        target_pass1=101.0, probe_every=20, probe_size=4))
    return settings.DATA_DIR


def new_job(**config):
    from tests.trainer.helpers import TINY

    return Job.start(name="first", team="research", env="arithmetic", config={**TINY, "steps": 2, **config},
                     enqueue=False)


def test_the_first_job_on_an_environment_shows_the_base_policy_build_then_its_other_phases(transactional_db,
                                                                                          bare_data_dir):
    job, events = run_collecting(new_job())

    assert job.status == "completed", job.error
    phases = [e["data"]["phase"] for e in events if e["kind"] == "phase"]
    building = [p for p in phases if p.startswith("building the base policy for arithmetic")]
    assert building[0].endswith("(first job on it here; until pass@1 reaches 30%)")
    assert building[1] == building[0] + ": step 1 of at most 40"
    assert re.fullmatch(re.escape(building[0]) + r": step 20 of at most 40, pass@1 \d+%", building[20]), building[20]
    assert len(building) == 41  # the announcement, then each step (PHASE_EVERY_S is 0 here)
    assert phases[len(building):] == ["loading the base policy", "baseline evaluation (pass@1 before any update)",
                                      "training"]
    assert job.phase == ""  # ended: nothing in progress
    assert (bare_data_dir / "models" / "base-arithmetic.pt").exists()


def test_a_stop_during_the_build_ends_the_job_stopped_without_saving_a_half_built_base(transactional_db,
                                                                                       bare_data_dir, monkeypatch):
    job = new_job()
    building = pretrain.ensure_base_checkpoint

    def stop_at_step_5(env, cache_dir, device="cpu", progress=None, **kwargs):
        def watched(step, max_steps, info):
            if step == 5:
                Job.objects.filter(pk=job.pk).update(stop_requested=True)
            progress(step, max_steps, info)
        return building(env, cache_dir, device, progress=watched, **kwargs)

    monkeypatch.setattr(pretrain, "ensure_base_checkpoint", stop_at_step_5)

    job, _ = run_collecting(job)

    assert job.status == "stopped"
    assert job.status_changes.order_by("-at", "-id").first().reason == \
        "stopped while building the base policy (no checkpoint yet)"
    assert not (bare_data_dir / "models" / "base-arithmetic.pt").exists()
    assert job.stints.get().ended_at is not None
    assert job.steps_done == 0 and job.phase == ""


def test_the_base_policy_build_is_recorded_with_the_baseline_so_its_page_can_say_what_it_cost(transactional_db,
                                                                                               bare_data_dir):
    import time

    from costs.intelligence import base_build
    from trainer.models import Step

    before = time.time()
    job, _ = run_collecting(new_job())

    assert job.status == "completed", job.error
    baseline = Step.objects.get(job=job, step=0).metrics
    assert before <= baseline["base/build_started_at"] <= time.time()
    assert 0 < baseline["base/build_s"] < time.time() - before
    assert base_build(job)["seconds"] == baseline["base/build_s"]

    # The next job on the environment builds nothing, and its page says nothing of a build.
    second, _ = run_collecting(new_job())
    assert "base/build_s" not in Step.objects.get(job=second, step=0).metrics
    assert base_build(second) is None

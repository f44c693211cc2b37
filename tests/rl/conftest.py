"""Shared fixtures for the RL core: a tiny base policy per environment and a tiny config.

The tiny base (one layer, 32 wide, 60 warm-start steps) is built once per test
session; it is nowhere near fluent, which these tests do not need: they check
machinery, not learning.
"""

from __future__ import annotations

import pytest

from trainer.rl import ENV_NAMES, TrainConfig, ensure_base_checkpoint
from trainer.rl.model import GPTConfig

TINY_MODEL = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=64)


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("rl-base")
    for env in ENV_NAMES:
        ensure_base_checkpoint(env, base_dir, "cpu", model_config=TINY_MODEL, max_steps=60, batch_size=32, probe_size=8, probe_every=1000)
    return base_dir


@pytest.fixture
def make_config():
    """Return a function of overrides -> a TrainConfig for a run of well under a second per step."""
    return tiny_config


def tiny_config(**overrides) -> TrainConfig:
    values = dict(
        steps=6,
        prompts_per_step=4,
        group_size=4,
        max_new_tokens=12,
        minibatch_size=16,
        warmup_steps=1,
        eval_size=16,
        samples_per_step=3,
        lr=1e-3,
        temperature=1.5,  # a barely trained policy at 1.5 writes a mix of good and bad forms: rewards vary
    )
    values.update(overrides)
    return TrainConfig(**values)

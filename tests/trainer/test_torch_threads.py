"""A job never runs more torch threads than the cores of the process that runs it.

The start checks torch_threads against the machine that took the request; a
worker with fewer cores (another node, a pinned container) must cap it, not
oversubscribe. The test pins itself to one core, as such a worker would be.
"""

import os

import pytest

from trainer.rl import TrainConfig
from trainer.runner import torch_threads


@pytest.fixture
def one_core():
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def test_a_thread_count_above_the_workers_cores_is_capped_to_them(one_core, settings):
    settings.YARDSTICK_JOB_TORCH_THREADS = 0
    assert torch_threads(TrainConfig.from_dict({"torch_threads": os.cpu_count()})) == 1
    assert torch_threads(TrainConfig.from_dict({})) == 1  # unset: every core it may use


def test_the_setting_is_capped_too_and_used_when_the_config_says_nothing(one_core, settings):
    settings.YARDSTICK_JOB_TORCH_THREADS = 64
    assert torch_threads(TrainConfig.from_dict({})) == 1
    settings.YARDSTICK_JOB_TORCH_THREADS = 1
    assert torch_threads(TrainConfig.from_dict({})) == 1

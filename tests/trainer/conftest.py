"""Fixtures for job tests: a tiny base policy built once, a data dir per test, tiny configs.

The base checkpoint of a real run takes about a minute to warm up; the tests
put a tiny one (one layer, 32 wide, a few supervised steps) where the runner
looks for it, so a job of a few steps takes seconds. Each test gets its own
data dir (checkpoints under it), with `models/` pointing at the shared tiny base.
"""

import os

import pytest

from tests.conftest import database_url
from tests.trainer.helpers import TINY


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory):
    """A models dir holding a tiny base policy for arithmetic."""
    from trainer.rl.model import GPTConfig
    from trainer.rl.pretrain import pretrain

    path = tmp_path_factory.mktemp("models")
    for env in ("arithmetic",):
        pretrain(env, path, "cpu", model_config=GPTConfig(n_layer=1, n_head=2, n_embd=32),
                 max_steps=30, batch_size=32, target_pass1=101.0, probe_every=1000, probe_size=4)
    return path


@pytest.fixture
def data_dir(settings, tiny_models_dir, tmp_path):
    """settings.DATA_DIR for this test: its own checkpoints, the shared tiny base policies."""
    path = tmp_path / "data"
    path.mkdir()
    (path / "models").symlink_to(tiny_models_dir, target_is_directory=True)
    settings.DATA_DIR = path
    return path


@pytest.fixture
def make_job(db, data_dir):
    """Create a queued job with the tiny config (plus overrides), not enqueued."""
    from trainer.models import Job

    def make(enqueue=False, created_by=None, **config):
        return Job.start(name="tiny", team="research", env=config.pop("env", "arithmetic"),
                         config={**TINY, "steps": 4, **config}, created_by=created_by, enqueue=enqueue)

    return make


@pytest.fixture
def child_env(data_dir):
    """Environment for a subprocess (manage.py, a Celery worker) that uses this test's database,
    Redis and data dir, and starts no embedded server of its own."""
    from django.conf import settings

    return {
        **os.environ,
        "YARDSTICK_DATA_DIR": str(data_dir),
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "PYTHONUNBUFFERED": "1",
    }

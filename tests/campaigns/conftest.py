"""Campaign tests reuse the job tests' tiny base policy and data dir per test (tests/trainer/conftest.py)."""

from tests.trainer.conftest import data_dir, make_job, tiny_models_dir  # noqa: F401

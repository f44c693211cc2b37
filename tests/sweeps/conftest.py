"""Sweep tests run their trials on a real launch worker (tests/launch/conftest.py)."""

from tests.launch.conftest import launch_data_dir, launch_worker, recipe  # noqa: F401

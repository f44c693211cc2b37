"""Settings come from environment variables; a bad value stops start-up with a clear message."""

import os
import stat

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.conftest import manage
from yardstick.env import envbool, envint, envlist, envurl


def test_envbool_accepts_the_usual_spellings():
    assert envbool("DEBUG", False, {"DEBUG": "yes"}) is True
    assert envbool("DEBUG", True, {"DEBUG": "0"}) is False
    assert envbool("DEBUG", True, {}) is True


def test_envbool_rejects_anything_else_naming_the_variable_and_value():
    with pytest.raises(ImproperlyConfigured, match=r"DEBUG must be one of true/false.*got 'maybe'"):
        envbool("DEBUG", False, {"DEBUG": "maybe"})


def test_envint_rejects_text_and_values_below_the_minimum():
    with pytest.raises(ImproperlyConfigured, match="X must be an integer, got 'ten'"):
        envint("X", 1, environ={"X": "ten"})
    with pytest.raises(ImproperlyConfigured, match="X must be >= 1, got 0"):
        envint("X", 1, minimum=1, environ={"X": "0"})
    assert envint("X", 7, environ={}) == 7


def test_envlist_rejects_empty_items():
    assert envlist("ALLOWED_HOSTS", ["a"], {"ALLOWED_HOSTS": "x.org, y.org"}) == ["x.org", "y.org"]
    with pytest.raises(ImproperlyConfigured, match="ALLOWED_HOSTS must be a comma-separated list"):
        envlist("ALLOWED_HOSTS", [], {"ALLOWED_HOSTS": "x.org,,y.org"})


def test_envurl_checks_the_scheme_and_host():
    assert envurl("DATABASE_URL", ("postgresql",), {}) is None
    assert envurl("DATABASE_URL", ("postgresql",), {"DATABASE_URL": "postgresql://u@h/db"})
    with pytest.raises(ImproperlyConfigured, match=r"DATABASE_URL must start with one of postgresql://, got 'mysql://h/db'"):
        envurl("DATABASE_URL", ("postgresql",), {"DATABASE_URL": "mysql://h/db"})
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL must name a host"):
        envurl("REDIS_URL", ("redis",), {"REDIS_URL": "redis://"})


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("DATABASE_URL", "sqlite:///x.db", "DATABASE_URL must start with one of postgres://, postgresql://, pgsql://"),
        ("REDIS_URL", "http://localhost", "REDIS_URL must start with one of redis://, rediss://, unix://"),
        ("DEBUG", "perhaps", "DEBUG must be one of true/false"),
        ("SECRET_KEY", "short", "SECRET_KEY must be at least 32 characters, got 5"),
        ("ALLOWED_HOSTS", ",", "ALLOWED_HOSTS must be a comma-separated list"),
    ],
)
def test_a_bad_variable_stops_start_up_with_its_name_and_value(service_dir, name, value, message):
    result = manage("migrate", env={name: value, "YARDSTICK_DATA_DIR": str(service_dir)}, timeout=60)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (service_dir / "postgres").exists(), "nothing may start on a bad configuration"


def test_a_generated_secret_key_is_kept_private_and_reused(service_dir):
    env = {"YARDSTICK_DATA_DIR": str(service_dir), "SECRET_KEY": ""}
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    first = manage("shell", "-c", code, env=env, timeout=60)
    second = manage("shell", "-c", code, env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    key_file = service_dir / "secret-key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    first_key, second_key = first.stdout.split()[-1], second.stdout.split()[-1]
    assert first_key == second_key == key_file.read_text().strip()
    assert len(first_key) >= 50


def test_every_beat_entry_names_a_task_the_workers_know():
    from django.conf import settings

    from yardstick.celery import app

    app.loader.import_default_modules()  # what a worker does at start: every app's tasks module
    for key, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert entry["task"] in app.tasks, f"{key}: no task {entry['task']!r}"
        assert entry["schedule"] > 0, key

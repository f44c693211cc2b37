"""Every process starts in seconds: Django's start (every web process, worker and `manage.py` command) loads no
library that only a search, a training step or a Ray launch needs, and a command asked for its help answers
without starting or migrating a database.

Each test runs `manage.py` as a user does, in a process of its own, with a data dir that holds no database: a
command that started the embedded PostgreSQL would leave `<data dir>/postgres` behind."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Loaded where they are used (sweeps/search.py, trainer/rl, launch/on_ray.py; Twisted only by the web part's own
# `python -m daphne`): each costs a start from a second (Twisted, Ray's client) to several (scikit-learn, which
# Optuna's importance module loads; torch).
HEAVY = ("optuna", "sklearn", "torch", "transformers", "ray", "twisted")
# Run manage.py as `python manage.py ARGS` does, then print which of HEAVY the process holds.
PROBE = f"""
import runpy, sys
sys.argv = ["manage.py", *sys.argv[1:]]
try:
    runpy.run_path("manage.py", run_name="__main__")
except SystemExit as stop:
    if stop.code not in (0, None):
        raise
print("LOADED", sorted(m for m in {HEAVY!r} if m in sys.modules))
"""


def manage(tmp_path, *args):
    env = {"PATH": "/usr/bin:/bin", "YARDSTICK_DATA_DIR": str(tmp_path / "data"), "PYTHONDONTWRITEBYTECODE": "",
           "DJANGO_SETTINGS_MODULE": "yardstick.settings"}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.rsplit("LOADED", 1)[1].strip()
    return done.stdout, loaded


@pytest.mark.parametrize("args", [["check"], ["help"]], ids=" ".join)
def test_django_starts_without_the_search_training_or_ray_libraries(tmp_path, args):
    out, loaded = manage(tmp_path, *args)
    assert loaded == "[]", f"`manage.py {' '.join(args)}` loaded {loaded}: import them where they are used"
    assert not (tmp_path / "data" / "postgres").exists()


@pytest.mark.parametrize("args", [["collect", "--help"], ["create_token", "-h"], ["migrate", "--help"],
                                  ["help", "create_token"], ["attribute_costs", "--version"], ["train", "--help"]], ids=" ".join)
def test_a_command_asked_for_its_help_answers_without_a_database(tmp_path, args):
    out, loaded = manage(tmp_path, *args)
    assert ("usage: manage.py" in out) or out.split("LOADED")[0].strip()[0].isdigit(), out
    assert not (tmp_path / "data" / "postgres").exists(), "it started the embedded PostgreSQL"
    assert "Applying" not in out
    assert loaded == "[]", loaded

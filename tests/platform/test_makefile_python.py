"""`make run` and `make test` pick the newest Python that the pinned requirements support; `make run` installs
what the example recipes import."""

import os
import shutil
import subprocess

from tests.conftest import ROOT

MAKE = shutil.which("make")


def fake_python(folder, name, works):
    """A stand-in on the PATH: one that works answers the Makefile's version check with success;
    one that does not fails like a pyenv shim for a version that is not active."""
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n" if works else "#!/bin/sh\necho \"pyenv: $0: command not found\" >&2\nexit 127\n")
    path.chmod(0o755)
    return path


def chosen(folder):
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = str(folder)  # only the stand-ins: no Python of this machine can be found
    out = subprocess.run([MAKE, "-s", "-C", str(ROOT), "which-python"], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_it_picks_the_newest_supported_python_on_the_path(tmp_path):
    fake_python(tmp_path, "python3.11", works=True)
    newest = fake_python(tmp_path, "python3.12", works=True)
    assert chosen(tmp_path) == str(newest)


def test_it_skips_a_shim_that_cannot_run(tmp_path):
    fake_python(tmp_path, "python3.13", works=False)
    working = fake_python(tmp_path, "python3.12", works=True)
    assert chosen(tmp_path) == str(working)


def test_the_real_interpreter_it_picks_is_one_the_requirements_support():
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    path = subprocess.run([MAKE, "-s", "-C", str(ROOT), "which-python"], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()
    version = subprocess.run([path, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, check=True).stdout.split()
    assert (3, 11) <= tuple(map(int, version)) <= (3, 13)


def test_with_no_supported_python_it_says_which_versions_it_needs(tmp_path):
    fake_python(tmp_path, "python3", works=False)
    env = {"PATH": str(tmp_path), "HOME": os.environ.get("HOME", "/tmp")}
    # A throwaway copy of the Makefile and requirements, so the real .venv is never touched.
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("Makefile", "requirements.txt", "client/pyproject.toml"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text((ROOT / name).read_text())
    out = subprocess.run([MAKE, "-C", str(work), "venv"], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "needs Python 3.11, 3.12 or 3.13" in out.stdout + out.stderr
    assert not (work / ".venv").exists()


def test_make_run_installs_what_the_example_recipes_import():
    """The first launch (trl-grpo-cpu) runs on `make run` alone: its rule needs the examples' packages installed."""
    out = subprocess.run([MAKE, "-pn", "-C", str(ROOT), "run"], capture_output=True, text=True, check=True).stdout
    run = next(line for line in out.splitlines() if line.startswith("run:"))
    assert run.split(":", 1)[1].split() == [".venv/.installed", ".venv/.installed-examples"]

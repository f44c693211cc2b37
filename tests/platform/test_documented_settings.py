"""Every setting the docs name is read once, in yardstick/settings.py, and nowhere else has a default of its own.

A variable the README documents but nothing reads (YARDSTICK_DDP_TIMEOUT_S was
one) does nothing however a person sets it. These tests import the settings
in a fresh interpreter that records every environment variable read, and
hold that against the names the docs give.
"""

import ast
import json
import re
import subprocess
import sys

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Named in the docs, read by something other than the control plane's settings, on purpose.
NOT_SETTINGS = {
    "YARDSTICK_STOP_CHECK_S": "read by the client package (client/) inside a training process",
    "YARDSTICK_JOB_ID": "set by a launch worker for a launched run's processes; the node agents record it",
    "YARDSTICK_FUZZ_EXAMPLES": "a knob of the test suite",
    "YARDSTICK_SCREENSHOTS": "a knob of the test suite (tests/browser.py)",
    "YARDSTICK_TEST_DATA_DIR": "a knob of the test suite (the Makefile's)",
}
# Read by settings but not for a person to set.
UNDOCUMENTED_READS = {
    "YARDSTICK_TEST_DB": "the test suite names its database",
    "DJANGO_SETTINGS_MODULE": "Django's own",
}

# Records the variables that Yardstick's own code reads (the libraries it imports read their own).
_RECORD_READS = """
import json, os, sys
reads = set()
def note(key):
    caller = sys._getframe(2).f_code.co_filename
    if caller.startswith(os.getcwd()) and "/.venv/" not in caller:
        reads.add(key)
class Recording(dict):
    def get(self, key, default=None):
        note(key)
        return super().get(key, default)
    def __getitem__(self, key):
        note(key)
        return super().__getitem__(key)
    def __contains__(self, key):
        note(key)
        return super().__contains__(key)
os.environ = Recording(os.environ)
import yardstick.settings
print(json.dumps(sorted(reads)))
"""


def _settings_reads(tmp_path):
    out = subprocess.run([sys.executable, "-c", _RECORD_READS], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "YARDSTICK_DATA_DIR": str(tmp_path)}, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def _configuration_table():
    """The variables in the first column of the README's configuration table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    return names


def _documented():
    named = set()
    for path in DOCS:
        named.update(re.findall(r"\bYARDSTICK_[A-Z0-9_]+\b", path.read_text()))
    return named | _configuration_table()


def test_every_variable_the_docs_name_is_read_by_the_settings(tmp_path):
    reads = _settings_reads(tmp_path)
    unread = sorted(_documented() - reads - set(NOT_SETTINGS))
    assert not unread, f"documented but never read in yardstick/settings.py: {unread}"


def test_every_variable_the_settings_read_is_in_the_configuration_table(tmp_path):
    reads = _settings_reads(tmp_path)
    undocumented = sorted(reads - _configuration_table() - set(UNDOCUMENTED_READS))
    assert not undocumented, f"read by yardstick/settings.py but not in the README's configuration table: {undocumented}"


def _product_sources():
    skip = {"tests", "bench", "client", ".venv", "var", "node_modules"}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        # launch/examples: programs a recipe runs on a node (like client/), which read their run's variables.
        if parts[0] not in skip and "migrations" not in parts and parts[:2] != ("launch", "examples"):
            yield path


def test_no_module_keeps_a_default_of_its_own_for_a_setting():
    offenders = []
    for path in _product_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            # getattr(settings, "NAME", default): a second default beside the one in settings.
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) == 3 and isinstance(node.args[0], ast.Name) and node.args[0].id == "settings"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"settings read with a default outside yardstick/settings.py: {offenders}"


def test_only_the_settings_and_the_node_agent_read_the_environment():
    # The node-side agent (collector/agent) runs without Django, so it reads its one variable itself;
    # yardstick/env.py holds the readers settings use.
    allowed = {"yardstick/settings.py", "yardstick/env.py", "collector/agent/sources/__init__.py"}
    readers = []
    for path in _product_sources():
        name = str(path.relative_to(ROOT))
        if name in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in ("get", "__getitem__", "getenv")
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "environ"):
                readers.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "environ" and isinstance(node.ctx, ast.Load):
                readers.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.Attribute) and node.attr == "getenv":
                readers.append(f"{name}:{node.lineno}")
    assert not readers, f"environment read outside yardstick/settings.py: {readers}"


def test_the_ddp_timeout_a_person_sets_is_the_one_jobs_use(tmp_path):
    script = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'yardstick.settings'; django.setup(); "
              "from trainer.runner import ddp_timeout_s; print(ddp_timeout_s())")
    env = {"PATH": "/usr/bin:/bin", "YARDSTICK_DATA_DIR": str(tmp_path), "YARDSTICK_DDP_TIMEOUT_S": "45"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.stdout.split()[-1] == "45.0", out.stderr
    env["YARDSTICK_DDP_TIMEOUT_S"] = "5"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "YARDSTICK_DDP_TIMEOUT_S must be >= 10, got 5" in out.stderr

"""The architecture docs/architecture.md describes holds in the code.

`make test` runs `lint-imports` (.importlinter: which app may import which, the pure cores) and `ruff`
before pytest. These tests check what those do not: that the contracts do fail on a forbidden import,
that no module imports another app's private name, that the import graph has no circle, and that a
project import inside a function says why it is there.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp

from tests.conftest import ROOT

APPS = ("yardstick", "collector", "trainer", "costs", "tracking", "campaigns", "dashboard", "alerts", "exporter",
        "launch", "sweeps", "serving")


def _product_sources():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _lint_imports(root):
    lint_imports = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint_imports), "--no-cache"], cwd=root, capture_output=True, text=True)


def _copy_of_the_project(tmp_path):
    """The apps' sources and .importlinter in a folder of their own, to break an import in."""
    for path in [*(p for a in APPS for p in (ROOT / a).rglob("*.py")), ROOT / ".importlinter"]:
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    return tmp_path


def _add_import(root, module_path, line):
    path = root / module_path
    path.write_text(line + "\n" + path.read_text())


def test_the_contracts_hold():
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_contracts_fail_when_trainer_imports_collector(tmp_path):
    root = _copy_of_the_project(tmp_path)
    _add_import(root, "trainer/stoploss.py", "import collector.store  # noqa")
    out = _lint_imports(root)
    assert out.returncode != 0 and "trainer is not allowed to import collector" in out.stdout


def test_the_contracts_fail_when_the_rl_core_imports_django(tmp_path):
    root = _copy_of_the_project(tmp_path)
    _add_import(root, "trainer/rl/grpo.py", "import django.db  # noqa")
    out = _lint_imports(root)
    assert out.returncode != 0 and "trainer.rl is not allowed to import django" in out.stdout


def test_no_module_imports_a_private_name_of_another_app():
    offenders = []
    for path in _product_sources():
        own = path.relative_to(ROOT).parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                app = node.module.split(".")[0]
                private = [a.name for a in node.names if a.name.startswith("_")]
                if app in APPS and app != own and private:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {private} from {node.module}")
    assert offenders == []


def _circles(graph):
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = set()
            while not group or module not in group:
                group.add(stack.pop())
            on_stack.difference_update(group)
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_the_import_graph_has_no_circle():
    # An import made only for type checking is not a dependency at run time.
    graph = grimp.build_graph(*APPS, exclude_type_checking_imports=True)
    assert _circles(graph) == []


def test_a_project_import_inside_a_function_says_why():
    unexplained = []
    for path in _product_sources():
        lines = path.read_text().splitlines()
        for function in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                if not (getattr(node, "level", 0) or (module or "").split(".")[0] in APPS):
                    continue
                # A comment on the import's line, on its block's first line, or on the line above the block.
                first = node.lineno - 1
                while first > 0 and lines[first - 1].strip().startswith(("from ", "import ")):
                    first -= 1
                if not ("#" in lines[node.lineno - 1] or "#" in lines[first] or lines[first - 1].strip().startswith("#")):
                    unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert unexplained == []


# Which app owns a table, by the table's name.
TABLE_OWNERS = {"collector_": "collector", "telemetry_": "collector", "trainer_": "trainer", "costs_": "costs",
                "tracking_": "tracking", "campaigns_": "campaigns", "alerts_": "alerts", "yardstick_": "yardstick",
                "launch_": "launch", "sweeps_": "sweeps", "serving_": "serving"}
SQL_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+([a-z]+_[a-z0-9_]+)", re.IGNORECASE)


def test_no_app_names_another_apps_table_in_sql():
    offenders = []
    for path in _product_sources():
        own = path.relative_to(ROOT).parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for table in SQL_TABLE.findall(node.value):
                    owner = next((app for prefix, app in TABLE_OWNERS.items() if table.startswith(prefix)), None)
                    if owner and owner != own:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} names {table} ({owner}'s)")
    assert offenders == []

"""A benchmark runs as `python bench/X.py`, which puts bench/ first on sys.path: a module there named like an
installed package, the standard library or one of Yardstick's own apps is imported in its place
(`bench/vs_trl.py` importing TRL failed on "'requests' is not a package", `bench/upkeep.py` on
`trainer.models` while bench/trainer.py was there)."""

import importlib.metadata
import sys

from tests.conftest import ROOT


def importable_top_level_names():
    """The top-level modules an `import` could mean: the standard library's, every installed distribution's and the
    repository's own packages and modules."""
    own = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} | {p.stem for p in ROOT.glob("*.py")}
    return set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions()) | own


def test_no_benchmark_is_named_like_a_module_it_would_shadow():
    names = importable_top_level_names()
    assert "requests" in names and "trainer" in names  # the list is the real one, not empty

    shadowing = sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.stem in names)

    assert shadowing == []

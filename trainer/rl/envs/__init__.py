"""Environment registry: every public module in this package is one environment.

A module `trainer/rl/envs/<name>.py` defines `make() -> Environment`; dropping
one in is all it takes to add an environment.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from trainer.rl.envs._base import Environment

ENV_NAMES: tuple[str, ...] = tuple(
    sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
)


@functools.cache
def get_env(name: str) -> Environment:
    """Return the environment called `name`, or raise KeyError naming the known ones."""
    if name not in ENV_NAMES:
        raise KeyError(f"unknown environment {name!r}; known: {', '.join(ENV_NAMES)}")
    env = importlib.import_module(f"{__name__}.{name}").make()
    assert env.name == name, f"module {name} made an environment called {env.name!r}"
    return env


__all__ = ["ENV_NAMES", "Environment", "get_env"]

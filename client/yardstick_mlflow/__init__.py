"""Yardstick's side of an MLflow-logged training run.

- `YardstickRunContext` (registered as an `mlflow.run_context_provider` entry
  point): tags every new run with where it runs, so Yardstick can find its GPUs.
- `should_stop()`: whether an operator pressed Stop on the run in Yardstick.
- `StopCallback`: the same for a transformers (and so TRL) `Trainer`. Imported
  lazily: the package must not pull in transformers for a plain loop.
"""

# mlflow first: importing it loads this package's provider through the entry point, and when a script
# imports yardstick_mlflow before mlflow, .context must not be half-imported at that moment.
import mlflow  # noqa: E402,F401

from .context import YardstickRunContext, run_context_tags  # noqa: E402

__all__ = ["StopCallback", "YardstickRunContext", "end_killed", "run_context_tags", "should_stop"]

# MLflow imports this package while `mlflow` itself is still importing (to load
# the run-context provider), so nothing here may import mlflow's client at the
# top: the rest is imported on first use.
_LAZY = {"StopCallback": "callback", "should_stop": "stop", "end_killed": "stop"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'yardstick_mlflow' has no attribute {name!r}")

"""The suite's one way to wait: on a condition, never on the clock alone."""

import time
from pathlib import Path

import pytest


def wait_for(predicate, timeout_s=60.0, what="the condition", every_s=0.05, logs=()):
    """Call `predicate` until it returns something truthy, and return that.

    Past `timeout_s` the test fails naming `what` (a string, or a function
    giving one, for a message that says what was last seen), with the end of
    each file in `logs` that exists (the output of the processes waited on).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(every_s)
    tails = "".join(f"\n--- {p}:\n{Path(p).read_text(errors='replace')[-4000:]}" for p in logs if Path(p).exists())
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what() if callable(what) else what}{tails}")

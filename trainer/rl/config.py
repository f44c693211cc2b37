"""The one typed configuration of a GRPO post-training run.

`TrainConfig` is saved inside every checkpoint (`to_dict`) and rebuilt from it
(`from_dict`), so a resumed run trains with exactly the settings it started
with. `from_dict` is also the gate for settings typed by people in the browser:
every rejection is a `ConfigError` whose message names the field, the value and
what would be accepted, e.g. "group_size must be an integer >= 2, got 1".
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Callable

from trainer.rl.envs import ENV_NAMES


class ConfigError(ValueError):
    """A setting that cannot be used; `field` names it, `message` says why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class TrainConfig:
    # --- what to train on -------------------------------------------------
    env: str = "arithmetic"
    """Environment name, one of `ENV_NAMES`."""
    steps: int = 200
    """Number of GRPO updates in the run (also the length of the LR schedule)."""
    seed: int = 0
    """Seeds prompt selection, sampling and the Python/torch global RNGs."""

    # --- rollout ----------------------------------------------------------
    prompts_per_step: int = 128
    """Distinct training prompts per step (many prompts generalise better than many completions of few)."""
    group_size: int = 8
    """Completions sampled per prompt (G); advantages are normalised within a group."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (evaluation is always greedy)."""
    top_k: int = 0
    """Sample only from the k most likely tokens; 0 turns the filter off. The update still scores
    tokens under the full temperature-scaled distribution."""
    max_new_tokens: int = 40
    """Cap on completion tokens per rollout, tool results included; longer ones are truncated (reward 0)."""

    # --- update -----------------------------------------------------------
    lr: float = 5e-4
    """Peak AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay on matrices (not on norms)."""
    kl_coef: float = 0.02
    """Weight of the k3 KL penalty to the frozen reference (base) policy."""
    clip_eps: float = 0.2
    """PPO clip range: the importance ratio is clipped to [1 - eps, 1 + eps]."""
    inner_epochs: int = 1
    """Passes over each step's rollouts."""
    minibatch_size: int = 256
    """Rollouts per optimizer step: a step's prompts_per_step * group_size rollouts (1024 by default) are
    shuffled and split into chunks of this size, so the defaults make 4 clipped updates per step."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global L2 norm before each optimizer step."""
    warmup_steps: int = 10
    """Steps of linear LR warmup from lr / warmup_steps up to lr."""
    lr_schedule: str = "cosine"
    """After warmup: "constant", or "cosine" decay to 10% of lr at the last step."""

    # --- evaluation and bookkeeping (read by the job runner) ---------------
    eval_every: int = 25
    """Evaluate held-out pass@1 every this many steps (and once before the first)."""
    eval_size: int = 500
    """Held-out prompts per evaluation; 500 swing by about +-3 points."""
    checkpoint_every: int = 50
    """Write a checkpoint every this many steps."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints to keep on disk."""
    samples_per_step: int = 4
    """Rollouts (prompt, completion, reward) kept per step for the dashboard."""
    torch_threads: int = 0
    """torch.set_num_threads for this run, so two jobs on one machine do not fight; 0 leaves it as is."""

    # ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """Return a config from `d` (missing fields take defaults) or raise ConfigError."""
        if not isinstance(d, dict):
            raise ConfigError("config", f"config must be a mapping of field names to values, got {d!r}")
        names = [f.name for f in dataclasses.fields(cls)]
        for key in d:
            if key not in names:
                raise ConfigError(str(key), f"unknown field {key!r}; accepted fields are {', '.join(names)}")
        return cls(**d)  # __post_init__ checks every field

    def to_dict(self) -> dict[str, Any]:
        """Return plain values (JSON-safe) that `from_dict` turns back into this config."""
        return dataclasses.asdict(self)

    def __post_init__(self):
        # Defaults and direct construction go through the same rules as from_dict.
        for name, check in _RULES.items():
            object.__setattr__(self, name, check(name, getattr(self, name)))


# --- validation rules: one per field -------------------------------------------


def _shown(value: Any) -> str:
    """repr(value), except for an integer too long to read (or for Python to print: 10^4300 raises)."""
    if isinstance(value, int) and value.bit_length() > 100:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return repr(value)


def _integer(minimum: int, maximum: int | Callable[[], int]) -> Callable[[str, Any], int]:
    """An integer from minimum to maximum; a callable maximum is asked at each check (the cores of this machine)."""

    def check(name: str, value: Any) -> int:
        high = maximum() if callable(maximum) else maximum
        # bool is an int subclass; True for a step count is a typo, not a number.
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok or not minimum <= value <= high:
            raise ConfigError(name, f"{name} must be an integer from {minimum} to {high}, got {_shown(value)}")
        return value

    return check


def _cores() -> int:
    """torch_threads' upper bound: more threads than cores only slows a run, and 10^6 crashed the worker."""
    return os.cpu_count() or 1


def _number(low: float, high: float | None = None, *, low_open: bool, high_open: bool = True) -> Callable[[str, Any], float]:
    parts = [f"{'>' if low_open else '>='} {low:g}"]
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    accepted = "a number " + " and ".join(parts)

    def check(name: str, value: Any) -> float:
        # An int is compared as it is: float(10**400) would overflow.
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and math.isfinite(value))
        if ok:
            ok = value > low if low_open else value >= low
        if ok and high is not None:
            ok = value < high if high_open else value <= high
        if not ok:
            raise ConfigError(name, f"{name} must be {accepted}, got {_shown(value)}")
        return float(value)

    return check


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise ConfigError(name, f"{name} must be one of {', '.join(options)}, got {value!r}")
        return value

    return check


# Upper bounds: what a real run of this trainer could use, and no more (an unbounded steps once filled the
# one-slot jobs queue for good; steps >= 2^31 does not fit the step columns).
MAX_STEPS = 100_000
_RULES: dict[str, Callable[[str, Any], Any]] = {
    "env": _choice(ENV_NAMES),
    "steps": _integer(1, MAX_STEPS),
    "seed": _integer(0, 2**63 - 1),
    "prompts_per_step": _integer(1, 4096),
    "group_size": _integer(2, 256),
    "temperature": _number(0, 10, low_open=True, high_open=False),
    "top_k": _integer(0, 1024),
    "max_new_tokens": _integer(1, 512),
    "lr": _number(0, 1, low_open=True, high_open=False),
    "weight_decay": _number(0, 1, low_open=False, high_open=False),
    "kl_coef": _number(0, 10, low_open=False, high_open=False),
    "clip_eps": _number(0, 1, low_open=True),
    "inner_epochs": _integer(1, 16),
    "minibatch_size": _integer(1, 65_536),
    "max_grad_norm": _number(0, 1000, low_open=True, high_open=False),
    "warmup_steps": _integer(0, MAX_STEPS),
    "lr_schedule": _choice(("constant", "cosine")),
    "eval_every": _integer(1, MAX_STEPS),
    "eval_size": _integer(1, 10_000),
    "checkpoint_every": _integer(1, MAX_STEPS),
    "keep_checkpoints": _integer(1, 100),
    "samples_per_step": _integer(0, 256),
    "torch_threads": _integer(0, _cores),
}

assert set(_RULES) == {f.name for f in dataclasses.fields(TrainConfig)}, "every field needs a rule"

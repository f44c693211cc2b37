"""What every environment shares: splits, prompt sampling and answer parsing.

An environment is a task with a verifiable reward. It makes prompts from a
problem space split once and for all into train and held-out eval parts by a
hash of the prompt text (so the split does not depend on seeds, order or how
many prompts were asked for), writes demonstrations for the supervised warm
start, and scores completions with `score(prompt, completion) -> [0, 1]`.
The completion given to `score` excludes the end-of-sequence newline; a rollout
that never ended gets reward 0 without being scored.
"""

from __future__ import annotations

import random
import re
import zlib

import torch

EVAL_SHARE = 5  # one prompt in EVAL_SHARE belongs to the held-out eval split
_INTEGER = re.compile(r"-?\d+")


class Environment:
    name: str = ""
    prompt_width: int = 0  # prompts are left-padded with PAD to this many tokens
    max_tool_calls: int = 0  # 0: the environment has no tools
    format_credit: float = 0.1  # reward for a well-formed but wrong answer
    warm_start_target: float = 30.0  # greedy pass@1 at which the supervised warm start stops

    # --- to implement --------------------------------------------------------
    def make_prompt(self, rng: random.Random) -> str:
        """Return one prompt drawn with `rng` from the whole problem space."""
        raise NotImplementedError

    def demonstration(self, prompt: str, rng: random.Random) -> list[tuple[str, bool]]:
        """Return a warm-start completion as (text, written_by_policy) pieces.

        Pieces written by the environment (tool results) are not trained on.
        """
        raise NotImplementedError

    def score(self, prompt: str, completion: str) -> float:
        raise NotImplementedError

    def tool_result(self, completion: str) -> str:
        """Return what the environment appends after a completion ending in a tool call."""
        raise NotImplementedError(f"{self.name} has no tools")

    # --- shared ----------------------------------------------------------------
    @staticmethod
    def split_of(prompt: str) -> str:
        return "eval" if zlib.crc32(prompt.encode()) % EVAL_SHARE == 0 else "train"

    def prompts(self, n: int, rng: random.Random, split: str) -> list[str]:
        """Return n prompts of `split` ("train" or "eval") drawn with rng (repeats allowed)."""
        out = []
        while len(out) < n:
            p = self.make_prompt(rng)
            if self.split_of(p) == split:
                out.append(p)
        return out

    def sample_train_prompts(self, n: int, generator: torch.Generator) -> list[str]:
        """Return n training prompts; all randomness comes from the (CPU) torch generator."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        return self.prompts(n, random.Random(seed), "train")

    def eval_prompts(self, n: int) -> list[str]:
        """Return the first n distinct held-out prompts; the same list on every call."""
        rng = random.Random(1_000_003)
        seen: dict[str, None] = {}
        while len(seen) < n:
            seen.setdefault(self.prompts(1, rng, "eval")[0], None)
        return list(seen)

    def score_integer(self, answer: str, expected: int) -> float:
        """1.0 for the exact integer, format_credit for another integer, 0.0 for anything else."""
        if _INTEGER.fullmatch(answer) is None:
            return 0.0
        return 1.0 if answer == str(expected) else self.format_credit

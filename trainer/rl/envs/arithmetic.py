"""arithmetic: add or subtract two numbers of 1 to 3 digits, answer exactly.

Prompt "347+86=", completion "433" (the newline that ends it is not part of
the completion). Differences may be negative: "86-347=" -> "-261".

Reward: 1.0 for the exact answer; 0.1 partial credit for a well-formed but
wrong answer (an integer, optionally negative, nothing else); 0.0 for anything
else. The warm-start policy is already fluent in the format, so the partial
credit mostly marks a completion that wandered off into non-numbers.
"""

from __future__ import annotations

import random

from trainer.rl.envs._base import Environment

MAX_DIGITS = 3


class Arithmetic(Environment):
    name = "arithmetic"
    prompt_width = 2 * MAX_DIGITS + 2

    def make_prompt(self, rng: random.Random) -> str:
        a = _number(rng)
        b = _number(rng)
        op = rng.choice("+-")
        return f"{a}{op}{b}="

    def answer(self, prompt: str) -> int:
        expr = prompt.rstrip("=")
        if "+" in expr:
            a, b = expr.split("+")
            return int(a) + int(b)
        a, b = expr.split("-")
        return int(a) - int(b)

    def demonstration(self, prompt: str, rng: random.Random) -> list[tuple[str, bool]]:
        return [(str(self.answer(prompt)), True)]

    def score(self, prompt: str, completion: str) -> float:
        return self.score_integer(completion, self.answer(prompt))


def _number(rng: random.Random) -> int:
    digits = rng.randint(1, MAX_DIGITS)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def make() -> Arithmetic:
    return Arithmetic()

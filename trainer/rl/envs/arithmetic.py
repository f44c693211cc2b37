"""arithmetic: add or subtract two numbers of 1 to 3 digits, answer exactly.

Numbers are written right-aligned in fixed-width fields, as on a calculator
display or in a column sum: operands in 3 characters, the answer in 4.

    prompt "347+ 86="   completion " 433"
    prompt " 86-  7="   completion "  79"

Subtraction always takes the smaller number from the larger, so answers are
never negative. Fixed fields put digits of the same place value at the same
positions in every problem, which lets a small character model learn the
carries (with variable widths the same model learns several times slower).

Reward: 1.0 for the exact answer in its 4-character field; 0.1 partial credit
for a well-formed but wrong answer (4 characters: spaces, then digits); 0.0
for anything else, including a right number in the wrong field width.
"""

from __future__ import annotations

import random
import re

from trainer.rl.envs._base import Environment

OPERAND_WIDTH = 3
ANSWER_WIDTH = OPERAND_WIDTH + 1
_WELL_FORMED = re.compile(rf"(?=.{{{ANSWER_WIDTH}}}$) *\d+")


class Arithmetic(Environment):
    name = "arithmetic"
    prompt_width = 2 * OPERAND_WIDTH + 2

    def make_prompt(self, rng: random.Random) -> str:
        a, b = _number(rng), _number(rng)
        op = rng.choice("+-")
        if op == "-" and b > a:
            a, b = b, a
        return f"{a:>{OPERAND_WIDTH}}{op}{b:>{OPERAND_WIDTH}}="

    def answer(self, prompt: str) -> str:
        """Return the expected completion: the result right-aligned in ANSWER_WIDTH characters."""
        a, op, b = prompt[:OPERAND_WIDTH], prompt[OPERAND_WIDTH], prompt[OPERAND_WIDTH + 1 : -1]
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        return f"{value:>{ANSWER_WIDTH}}"

    def demonstration(self, prompt: str, rng: random.Random) -> list[tuple[str, bool]]:
        return [(self.answer(prompt), True)]

    def score(self, prompt: str, completion: str) -> float:
        if completion == self.answer(prompt):
            return 1.0
        return self.format_credit if _WELL_FORMED.fullmatch(completion) else 0.0


def _number(rng: random.Random) -> int:
    digits = rng.randint(1, OPERAND_WIDTH)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def make() -> Arithmetic:
    return Arithmetic()

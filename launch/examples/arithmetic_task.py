"""The arithmetic task the example scripts train and evaluate on: prompts, answers, a verifiable reward.

Two numbers of 1 to 3 digits are added or subtracted (never below zero). Operands are right-aligned in
3-character fields and the answer in a 4-character one, so each place value sits at the same position in
every problem: "347+ 86=" is answered " 433". This is the task Yardstick's own trainer calls
`arithmetic`, written again here on purpose: the example scripts run on nodes that have TRL and MLflow
but not Yardstick's trainer, and each script imports only this file beside it.
"""

import random
import re

OPERAND_WIDTH, ANSWER_WIDTH = 3, 4
FORMAT_CREDIT = 0.1  # a well-formed answer that is wrong: the shape is learnt before the sums
_WELL_FORMED = re.compile(rf"(?=.{{{ANSWER_WIDTH}}}$) *\d+")


def _operand(rng):
    digits = rng.randint(1, OPERAND_WIDTH)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def prompt(rng):
    """One problem as the model sees it, e.g. " 86-  7="."""
    a, b, op = _operand(rng), _operand(rng), rng.choice("+-")
    if op == "-" and b > a:
        a, b = b, a
    return f"{a:>{OPERAND_WIDTH}}{op}{b:>{OPERAND_WIDTH}}="


def prompts(n, seed):
    """`n` problems drawn with `seed`: the same list for the same seed on any machine."""
    rng = random.Random(seed)
    return [prompt(rng) for _ in range(n)]


def answer(problem):
    """The exact completion a problem expects, e.g. "  79" for " 86-  7="."""
    a, op, b = int(problem[:OPERAND_WIDTH]), problem[OPERAND_WIDTH], int(problem[OPERAND_WIDTH + 1:-1])
    return f"{a + b if op == '+' else a - b:>{ANSWER_WIDTH}}"


def score(problem, completion):
    """1.0 for the exact answer, FORMAT_CREDIT for a wrong one of the right shape, 0.0 for anything else."""
    if completion == answer(problem):
        return 1.0
    return FORMAT_CREDIT if _WELL_FORMED.fullmatch(completion) else 0.0


def reward(prompts, completions, **_):
    """TRL's reward-function signature: one score per (prompt, completion)."""
    return [score(p, c) for p, c in zip(prompts, completions)]

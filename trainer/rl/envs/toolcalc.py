"""toolcalc: products too big to do in the head, with a calculator to call.

Prompt "47*86+51=", expected answer "4093". Problems are a*b, a*b+c or a*b-c
with a and b of 2 digits and c of 1 or 2.

The policy may write a calculator call, `<calc>47*86+51</calc>`. Generation
pauses at `</calc>`; the environment computes the expression (non-negative
integers with + - * and the usual precedence, parsed by hand, never eval) and
appends `<out>4093</out>`, or `<err>` for anything it cannot compute
(malformed text, more than 8 numbers, numbers over 9 digits, or more than
MAX_TOOL_CALLS calls in one episode). A malformed call is an observation for
the policy, never a crash. The policy then writes its final answer.

Reward: the final answer is the text after the last tool result (the whole
completion when there was no call). 1.0 when it is the exact integer; 0.1
partial credit for a well-formed but wrong integer; 0.0 otherwise. Tool calls
cost nothing and earn nothing by themselves.

The warm-start demonstrator reaches for the calculator on 85% of problems
whose first digit is 1-4 and 10% of the others, and otherwise writes the true
answer directly, which a small model cannot compute. So the base policy, greedy,
uses the tool on the 4 problems in 9 that start with 1-4 and on few others, and
RL has to learn that the calculator pays off everywhere: reward and tool use
should rise together.
"""

from __future__ import annotations

import random
import re

from trainer.rl.envs._base import Environment
from trainer.rl.vocab import CALC, CALC_END, ERR, OUT, OUT_END

MAX_TOOL_CALLS = 3
_EXPR = re.compile(r"\d{1,9}(?:[+\-*]\d{1,9}){0,7}")


def calculate(expr: str) -> int | None:
    """Return the value of `expr` (integers joined by + - *, * first) or None if malformed."""
    expr = expr.replace(" ", "")
    if _EXPR.fullmatch(expr) is None:
        return None
    total = 0
    sign = 1
    term = 1
    number = ""
    for ch in expr + "+":
        if ch.isdigit():
            number += ch
            continue
        term *= int(number)
        number = ""
        if ch == "*":
            continue
        total += sign * term
        sign = 1 if ch == "+" else -1
        term = 1
    return total


class ToolCalc(Environment):
    name = "toolcalc"
    prompt_width = 10  # "99*99+99=" is 9
    max_tool_calls = MAX_TOOL_CALLS

    def make_prompt(self, rng: random.Random) -> str:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        kind = rng.choice(("", "+", "-"))
        if not kind:
            return f"{a}*{b}="
        return f"{a}*{b}{kind}{rng.randint(1, 99)}="

    def answer(self, prompt: str) -> int:
        return calculate(prompt.rstrip("="))

    def demonstration(self, prompt: str, rng: random.Random) -> list[tuple[str, bool]]:
        value = str(self.answer(prompt))
        use_tool = rng.random() < (0.85 if prompt[0] in "1234" else 0.10)
        if not use_tool:
            return [(value, True)]
        expr = prompt.rstrip("=")
        return [(f"{CALC}{expr}{CALC_END}", True), (f"{OUT}{value}{OUT_END}", False), (value, True)]

    def tool_result(self, completion: str) -> str:
        if completion.count(CALC_END) > self.max_tool_calls:
            return ERR
        body = completion[: -len(CALC_END)]
        start = body.rfind(CALC)
        if start < 0 or CALC_END in body[start:]:
            return ERR
        value = calculate(body[start + len(CALC) :])
        return ERR if value is None else f"{OUT}{value}{OUT_END}"

    def score(self, prompt: str, completion: str) -> float:
        cut = max(completion.rfind(OUT_END) + len(OUT_END) if OUT_END in completion else 0,
                  completion.rfind(ERR) + len(ERR) if ERR in completion else 0)
        return self.score_integer(completion[cut:], self.answer(prompt))


def make() -> ToolCalc:
    return ToolCalc()

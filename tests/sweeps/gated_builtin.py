"""The built-in trainer's launched script (launch/examples/builtin_grpo.py), unchanged but for a gate after each
evaluation past the first, as tests/sweeps/surface_script.py has: it waits at DIR/<job id>-<step> (the test charges
the steps so far and lets the sweep take a pass) or until it is asked to stop, which the script then honours at that
step as it does any stop. Usage: gated_builtin.py --gate DIR <builtin_grpo.py's arguments>."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "launch" / "examples"), str(HERE)]

import builtin_grpo  # noqa: E402
from surface_script import wait  # noqa: E402


def main(argv):
    at = argv.index("--gate")
    gate, rest = argv[at + 1], argv[:at] + argv[at + 2:]
    evaluate = builtin_grpo.evaluate

    def gated(trainer):
        pass1 = evaluate(trainer)
        if trainer.step:
            wait(gate, trainer.step)
        return pass1

    builtin_grpo.evaluate = gated
    return builtin_grpo.main(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

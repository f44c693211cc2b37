"""A launched run whose score is a known function of its parameters and of the dollars it spends, for the sweep
tests and bench/sweep.py: at step k of --steps it logs `score` = quality(x) × (1 − 0.8^k), quality(x) = 100 − 200 ×
(x − 0.3)², to the job's MLflow run; tests/sweeps/bill.py charges one minute of a known price per step, so the score
at d dollars is quality(x) × (1 − 0.8^(d / minute's price)).

With --gate DIR it waits, after step --steps // 2 and after its last step, until DIR/<job id>-<step> exists (the
test charges the steps so far, lets the sweep take a pass, then releases it), or until it is asked to stop.
--seed S moves every score after the first by noise(S), a known offset (a repeat's "other seed").
Usage: surface_script.py --x X --steps N [--gate DIR] [--seed S]."""

import argparse
import os
import time
from pathlib import Path

import mlflow

import yardstick_mlflow


def quality(x):
    return 100.0 - 200.0 * (x - 0.3) ** 2


def noise(seed):
    """A seed's offset to every score, known in advance: 0 for seed 0 (the other tests' runs), -1 to +1 points."""
    if not seed:
        return 0.0
    return ((seed * 7919) % 11 - 5) / 5.0


def score(x, step, seed=0):
    return quality(x) * (1.0 - 0.8 ** step) + (noise(seed) if step else 0.0)


def wait(gate, step):
    """True when released, False when asked to stop meanwhile."""
    if not gate:
        return True
    release = Path(gate) / f"{os.environ['YARDSTICK_JOB_ID']}-{step}"
    print(f"waiting at step {step}", flush=True)
    while not release.exists():
        if yardstick_mlflow.should_stop():
            print(f"stopped at step {step}", flush=True)
            return False
        time.sleep(0.05)
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", type=float, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--gate", default="")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with mlflow.start_run():  # the job's run: MLFLOW_RUN_ID
        for step in range(args.steps + 1):
            mlflow.log_metric("score", score(args.x, step, args.seed), step=step)
            if step in (args.steps // 2, args.steps) and not wait(args.gate, step):
                return


if __name__ == "__main__":
    main()

"""A launched run in miniature for the tests: logs `reward` every step to the job's MLflow run (MLFLOW_RUN_ID),
writes a `step_N` checkpoint folder every --every steps, ends at its stop flag after writing one (unless
--ignore-stop: then only a signal ends it), and with --from <checkpoint> goes on from that step. --busy spins
between steps instead of sleeping (a node agent's host source records busy processes as holders); --ignore-term
ignores SIGTERM too (only SIGKILL ends it).
Usage: steps_script.py --out DIR --steps N [--every K] [--from DIR] [--busy] [--ignore-stop] [--ignore-term]."""

import argparse
import signal
import time
from pathlib import Path

import mlflow

import yardstick_mlflow


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True, help="the step to end at")
    parser.add_argument("--more", action="store_true", help="--steps counts from where --from starts")
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=0.2)
    parser.add_argument("--from", dest="start_from", default="")
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--ignore-stop", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    first = int(Path(args.start_from).name.removeprefix("step_")) if args.start_from else 0
    last = first + args.steps if args.more else args.steps
    print(f"starting at step {first}", flush=True)
    with mlflow.start_run():  # the job's run: MLFLOW_RUN_ID
        for step in range(first + 1, last + 1):
            mlflow.log_metric("reward", step / last, step=step)
            print(f"step {step}", flush=True)
            # the active run (mlflow takes MLFLOW_RUN_ID from the environment)
            stop = yardstick_mlflow.should_stop() and not args.ignore_stop
            if step % args.every == 0 or stop or step == last:
                (Path(args.out) / f"step_{step}").mkdir(parents=True, exist_ok=True)
            if stop:
                print(f"stopped at step {step}, checkpoint written", flush=True)
                return
            if args.busy:
                until = time.monotonic() + args.sleep
                while time.monotonic() < until:
                    pass
            else:
                time.sleep(args.sleep)


if __name__ == "__main__":
    main()

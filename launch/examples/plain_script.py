"""A plain training loop, no framework: what any script needs to be launched, stopped and resumed by Yardstick.

The recipe `plain-script` (launch/examples/recipes.yaml) runs it. It shows the whole contract in a few
lines:

- `mlflow.start_run()` with no arguments joins the run Yardstick made for the job (MLFLOW_RUN_ID, with
  MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN, set by the worker); each step logs its metrics there.
- `yardstick_mlflow.should_stop()` says when an operator pressed Stop (it asks at most every
  YARDSTICK_STOP_CHECK_S seconds); the script then writes a checkpoint, ends its run KILLED and exits 0.
- Checkpoints are `step_N` folders in --output_dir; `--resume_from step_N` goes on at step N + 1.

The "training" is a made-up loss that falls with the steps, so the script runs anywhere in no time. It
prints a carriage-return progress bar, which the job's output shows as its last state.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

STATE_FILE = "state.json"
BAR_WIDTH = 30


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output_dir", required=True, help="where step_N checkpoint folders are written")
    ap.add_argument("--steps", type=int, default=100, help="steps in all, a resumed run's included")
    ap.add_argument("--sleep_s", type=float, default=0.5, help="seconds each step takes (the stand-in for work)")
    ap.add_argument("--save_every", type=int, default=10, help="write a checkpoint every this many steps")
    ap.add_argument("--resume_from", help="a step_N folder of an earlier run to go on from")
    return ap.parse_args(argv)


def load_step(checkpoint):
    """The step a checkpoint folder was written at (its state.json says), 0 without one."""
    if not checkpoint:
        return 0
    state = Path(checkpoint) / STATE_FILE
    if not state.is_file():
        sys.exit(f"--resume_from {checkpoint}: not a checkpoint of this script (no {STATE_FILE})")
    return int(json.loads(state.read_text())["step"])


def save(output_dir, step, metrics):
    """Write step_<step>/state.json, through a temporary folder so a half-written checkpoint never looks whole."""
    final = Path(output_dir) / f"step_{step}"
    tmp = final.with_name(f".{final.name}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / STATE_FILE).write_text(json.dumps({"step": step, "metrics": metrics}))
    tmp.replace(final)
    return final


def step_metrics(step):
    """A stand-in for a real step's results: a loss that falls and a score that climbs with the steps."""
    return {"train/loss": 2.0 * math.exp(-step / 50) + 0.1, "train/score": 100.0 * (1 - math.exp(-step / 80))}


def show(step, total, metrics):
    done = BAR_WIDTH * step // max(total, 1)
    bar = "#" * done + "." * (BAR_WIDTH - done)
    sys.stdout.write(f"\r[{bar}] step {step}/{total} loss {metrics['train/loss']:.3f}")
    sys.stdout.flush()


def train(args, first):
    """Steps first+1 .. args.steps; return (the last step done, whether Yardstick asked to stop)."""
    import mlflow

    from yardstick_mlflow import should_stop

    step, metrics = first, step_metrics(first)
    for step in range(first + 1, args.steps + 1):
        time.sleep(args.sleep_s)
        metrics = step_metrics(step)
        mlflow.log_metrics(metrics, step=step)
        show(step, args.steps, metrics)
        if should_stop():
            save(args.output_dir, step, metrics)
            return step, True
        if step % args.save_every == 0:
            save(args.output_dir, step, metrics)
    if step > first and step % args.save_every:
        save(args.output_dir, step, metrics)
    return step, False


def main(argv=None):
    import mlflow

    from yardstick_mlflow import end_killed

    args = parse_args(argv)
    first = load_step(args.resume_from)
    print(f"training steps {first + 1} to {args.steps}" + (f" (resumed from {args.resume_from})"
                                                          if args.resume_from else ""), flush=True)
    run = mlflow.start_run()  # the job's run when MLFLOW_RUN_ID is set
    if first == 0:  # a run's params are written once: a resumed run keeps those it started with
        mlflow.log_params({"steps": args.steps, "sleep_s": args.sleep_s, "save_every": args.save_every})
    last, stopped = train(args, first)
    print(flush=True)  # ends the progress bar's line
    if stopped:
        print(f"stopped as asked at step {last}; checkpoint {Path(args.output_dir) / f'step_{last}'}", flush=True)
        end_killed(run.info.run_id)
    else:
        print(f"finished at step {last}", flush=True)
        mlflow.end_run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

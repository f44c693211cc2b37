"""Yardstick's own GRPO trainer (trainer/rl) as a launched script, reporting to the job's MLflow run.

`manage.py train` makes a job of its own and writes to the database, so it cannot report into the run a
launched job already has. This script runs the same `trainer.rl.Trainer` in-process instead, with no
Django: it logs each step's metrics (train/reward_mean, train/kl, ...) and each evaluation's eval/pass1
(points, 0 to 100; once before the first step, every --eval_every steps and at the end) to the run of
MLFLOW_RUN_ID, writes `step_N/trainer.pt` checkpoints into --output_dir, and when an operator presses
Stop (yardstick_mlflow.should_stop) writes one more, ends its run KILLED and exits 0. `--resume_from
step_N` goes on from a checkpoint with the settings it was started with; `--init_from step_N` starts a new
run from another run's policy (a Continue, a campaign's next run); `--prepare_only` builds the base policy and
exits (a sweep's shared setup, so that no trial pays for it).

The base policy of the environment is pretrained on first use (about a minute on a CPU) into --base_dir,
the same cache the built-in runner uses, and read from there afterwards.
"""

import argparse
import json
import os
import sys
from pathlib import Path

YARDSTICK = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(YARDSTICK))  # trainer.rl: pure PyTorch, importable without Django

CHECKPOINT_FILE = "trainer.pt"


def default_base_dir():
    """Where the built-in runner keeps base policies: <YARDSTICK_DATA_DIR or Yardstick's var>/models."""
    data = os.environ.get("YARDSTICK_DATA_DIR") or str(YARDSTICK / "var")
    return Path(data).expanduser().resolve() / "models"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output_dir", required=True, help="where step_N checkpoint folders are written")
    ap.add_argument("--env", default="arithmetic", help="the environment to train on (trainer/rl/envs)")
    ap.add_argument("--steps", type=int, default=50, help="GRPO steps in all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval_every", type=int, default=10, help="evaluate pass@1 every this many steps")
    ap.add_argument("--checkpoint_every", type=int, default=10, help="write a checkpoint every this many steps")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="another TrainConfig field (repeatable), the value as JSON: prompts_per_step=32")
    ap.add_argument("--base_dir", type=Path, default=None,
                    help="the base policies' cache (default: the built-in runner's, <data dir>/models)")
    ap.add_argument("--resume_from", help="a step_N folder of an earlier run to go on from")
    ap.add_argument("--init_from", help="a step_N folder of another run: a new run (step 0, a fresh optimizer, the "
                                        "flags' config) starts from its policy, which is also its KL reference")
    ap.add_argument("--device", default="auto", help="auto (cuda when there is one), cpu or cuda:N")
    ap.add_argument("--prepare_only", action="store_true",
                    help="build --env's base policy into --base_dir (if missing) and exit: a sweep's shared setup")
    return ap.parse_args(argv)


def train_config(args):
    """The TrainConfig of a fresh run: the flags, then each --config KEY=VALUE."""
    # here: trainer.rl loads torch, which --help does not need
    from trainer.rl import ConfigError, TrainConfig

    fields = {"env": args.env, "steps": args.steps, "seed": args.seed, "eval_every": args.eval_every,
              "checkpoint_every": args.checkpoint_every}
    for item in args.config:
        key, sep, raw = item.partition("=")
        if not sep:
            sys.exit(f"--config {item!r}: expected KEY=VALUE, e.g. prompts_per_step=32")
        try:
            fields[key.strip()] = json.loads(raw)
        except ValueError:
            fields[key.strip()] = raw  # a bare word: lr_schedule=constant
    try:
        return TrainConfig.from_dict(fields)
    except ConfigError as err:
        sys.exit(f"--{err.field if err.field in fields and err.field in vars(args) else 'config ' + err.field}: "
                 f"{err.message}")


def make_trainer(args, device):
    # here: trainer.rl loads torch, which --help does not need
    from trainer.rl import Trainer

    base_dir = args.base_dir or default_base_dir()
    if args.resume_from:
        path = Path(args.resume_from) / CHECKPOINT_FILE
        if not path.is_file():
            sys.exit(f"--resume_from {args.resume_from}: no {CHECKPOINT_FILE} there")
        return Trainer.from_checkpoint(path, base_dir, device)
    config = train_config(args)
    if args.init_from:
        path = Path(args.init_from) / CHECKPOINT_FILE
        if not path.is_file():
            sys.exit(f"--init_from {args.init_from}: no {CHECKPOINT_FILE} there (a step_N folder of a built-in run)")
        print(f"policy from {path}", flush=True)
        return Trainer.from_policy(config, path, device)
    print(f"base policy for {config.env} from {base_dir} (pretrained there first if missing)", flush=True)
    return Trainer(config, base_dir, device)


def save(trainer, output_dir):
    folder = Path(output_dir) / f"step_{trainer.step}"
    trainer.save_checkpoint(folder / CHECKPOINT_FILE)
    return folder


def evaluate(trainer):
    import mlflow

    metrics = trainer.evaluate()
    mlflow.log_metrics(metrics, step=trainer.step)
    return metrics["eval/pass1"]


def run(trainer, output_dir):
    """Train to the config's last step; return True when Yardstick asked to stop first."""
    import mlflow

    from yardstick_mlflow import should_stop

    cfg = trainer.config
    pass1 = evaluate(trainer) if trainer.step == 0 else None
    while trainer.step < cfg.steps:
        result = trainer.train_step()
        mlflow.log_metrics(result.metrics, step=result.step)
        if result.step % cfg.eval_every == 0 or result.step == cfg.steps:
            pass1 = evaluate(trainer)
        shown = f", eval pass@1 {pass1:.1f}" if pass1 is not None else ""
        print(f"step {result.step}/{cfg.steps}: reward {result.metrics['train/reward_mean']:.3f}{shown}", flush=True)
        if should_stop():
            print(f"stopped as asked; checkpoint {save(trainer, output_dir)}", flush=True)
            return True
        if result.step % cfg.checkpoint_every == 0 or result.step == cfg.steps:
            save(trainer, output_dir)
    return False


def main(argv=None):
    import mlflow
    import torch

    from yardstick_mlflow import end_killed

    args = parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.prepare_only:
        # here: trainer.rl loads torch, which --help does not need
        from trainer.rl.pretrain import ensure_base_checkpoint

        base_dir = args.base_dir or default_base_dir()
        print(f"base policy for {args.env}: {ensure_base_checkpoint(args.env, base_dir, device)}", flush=True)
        return
    trainer = make_trainer(args, device)
    run_id = mlflow.start_run().info.run_id  # the job's run when MLFLOW_RUN_ID is set
    if trainer.step == 0:  # a resumed run keeps the params it started with
        mlflow.log_params(trainer.config.to_dict())
    print(f"GRPO on {trainer.config.env} on {device}, steps {trainer.step + 1} to {trainer.config.steps}", flush=True)
    if run(trainer, args.output_dir):
        end_killed(run_id)
    else:
        mlflow.end_run()
        print(f"finished at step {trainer.step}; checkpoints in {args.output_dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

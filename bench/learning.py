"""Run GRPO for N steps and print the held-out eval curve (figures, not a test).

    python bench/learning.py --env arithmetic --steps 200
    python bench/learning.py --env toolcalc --steps 60 --set eval_every=10

The base policy is built on first use and cached in --base-dir (default var/rl-base).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.rl import TrainConfig, Trainer, ensure_base_checkpoint  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="arithmetic")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-dir", type=Path, default=Path("var/rl-base"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="override a TrainConfig field")
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()

    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    config = TrainConfig.from_dict({"env": args.env, "steps": args.steps, "seed": args.seed, **overrides})

    started = time.perf_counter()
    ensure_base_checkpoint(
        config.env, args.base_dir, args.device,
        progress=lambda s, n, info: "pass1" in info and print(f"  pretrain step {s}: probe pass@1 {info['pass1']:.1f}", flush=True),
    )
    print(f"base ready in {time.perf_counter() - started:.0f} s", flush=True)

    run_started = time.perf_counter()
    trainer = Trainer(config, args.base_dir, args.device)
    curve = [(0, trainer.evaluate()["eval/pass1"])]
    print(f"step    0  eval pass@1 {curve[0][1]:5.1f}  (baseline)  wall {time.perf_counter() - run_started:5.0f} s", flush=True)
    while trainer.step < config.steps:
        result = trainer.train_step()
        m = result.metrics
        if trainer.step % args.log_every == 0 or trainer.step == 1:
            print(
                f"step {trainer.step:4d}  reward {m['train/reward_mean']:.3f}  kl {m.get('train/kl', 0):.4f}  "
                f"ent {m['train/entropy']:.3f}  tools {m['train/tool_calls_mean']:.2f}  "
                f"len {m['train/response_length_mean']:.1f}  step {m['timing/step_s']:.2f} s",
                flush=True,
            )
        if trainer.step % config.eval_every == 0 or trainer.step == config.steps:
            pass1 = trainer.evaluate()["eval/pass1"]
            curve.append((trainer.step, pass1))
            print(f"step {trainer.step:4d}  eval pass@1 {pass1:5.1f}  ({pass1 - curve[0][1]:+.1f})  "
                  f"wall {time.perf_counter() - run_started:5.0f} s", flush=True)
    wall = time.perf_counter() - run_started
    best = max(p for _, p in curve)
    print(f"\n{config.env}: baseline {curve[0][1]:.1f} -> final {curve[-1][1]:.1f} "
          f"({curve[-1][1] - curve[0][1]:+.1f} points, best {best:.1f}) in {config.steps} steps, {wall:.0f} s wall incl. evals")


if __name__ == "__main__":
    main()

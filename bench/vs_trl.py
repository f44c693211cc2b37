"""Yardstick's GRPO step against TRL's GRPOTrainer on the same work, in one process.

    python bench/vs_trl.py [--steps N] [--threads N] [--device cpu|cuda]

Both sides: a freshly initialised policy of Yardstick's default size (4 layers,
4 heads, 128 wide; TRL gets a GPT-2 of that shape, built in code), the same
character vocabulary (TRL through a PreTrainedTokenizerFast over it, see
tests/trl_tiny.py), the arithmetic environment's prompts and verifiable reward,
1,024 rollouts (128 prompts x 8) of up to 40 tokens per step, 4 clipped
optimizer steps of 256 rollouts per step, k3 KL (beta 0.02) to a frozen
reference, sampling at temperature 1, the same torch thread count. Nothing is
downloaded. In TRL terms one Yardstick step is one generation feeding
steps_per_generation=4 optimizer steps (per_device_train_batch_size=256,
num_iterations=1), so its seconds per step are the time of those 4.

Prints seconds per step for each (after --warmup steps), generated tokens per
second, and the ratio per generated token (TRL's seconds per generated token
over Yardstick's; the goal: 2 or more). Random policies rarely
stop early, so most completions run to the 40-token cap on both sides; the
per-token ratio corrects for what difference remains. Never asserts on time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub: the model and tokenizer are built in code
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from tests.trl_tiny import grpo_trainer  # noqa: E402
from trainer.rl import TrainConfig, Trainer  # noqa: E402
from trainer.rl.model import GPT, GPTConfig  # noqa: E402
from trainer.rl.pretrain import atomic_save, base_checkpoint_path  # noqa: E402

PROMPTS, GROUP, UPDATES, MAX_NEW_TOKENS, KL = 128, 8, 4, 40, 0.02
ROLLOUTS = PROMPTS * GROUP
GOAL = 2.0


@dataclasses.dataclass
class Side:
    name: str
    step_s: list[float]
    gen_tokens: list[float]

    @property
    def s_per_step(self) -> float:
        return statistics.median(self.step_s)

    @property
    def tokens_per_s(self) -> float:
        return sum(self.gen_tokens) / sum(self.step_s)


def yardstick(steps: int, warmup: int, threads: int, device: str) -> Side:
    torch.manual_seed(0)
    config = GPTConfig()
    with tempfile.TemporaryDirectory() as tmp:
        atomic_save({"model_config": dataclasses.asdict(config),
                     "model": {k: v.cpu() for k, v in GPT(config).state_dict().items()}},
                    base_checkpoint_path("arithmetic", Path(tmp)))
        cfg = TrainConfig(env="arithmetic", prompts_per_step=PROMPTS, group_size=GROUP, max_new_tokens=MAX_NEW_TOKENS,
                          minibatch_size=ROLLOUTS // UPDATES, inner_epochs=1, kl_coef=KL, lr=5e-4, temperature=1.0,
                          steps=warmup + steps, eval_size=8, torch_threads=threads)
        trainer = Trainer(cfg, Path(tmp), device)
        for _ in range(warmup):
            trainer.train_step()
        times, tokens = [], []
        for _ in range(steps):
            m = trainer.train_step().metrics
            times.append(m["timing/step_s"])
            tokens.append(m["performance/gen_tokens"])
    return Side("Yardstick", times, tokens)


def trl(steps: int, warmup: int, threads: int, device: str) -> Side:
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    class Clock(TrainerCallback):
        """Times each group of UPDATES optimizer steps (one generation and its updates) and its generated tokens."""

        def __init__(self):
            self.marks: list[float] = []
            self.gen_tokens: list[float] = []

        def on_train_begin(self, args, state, control, **kwargs):
            _sync(device)
            self.marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % UPDATES == 0:
                _sync(device)
                self.marks.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            # logging_steps = UPDATES: each log holds exactly one generation's completion lengths
            if logs and "completions/mean_length" in logs:
                self.gen_tokens.append(logs["completions/mean_length"] * ROLLOUTS)

    clock = Clock()
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = grpo_trainer(tmp, rollouts=ROLLOUTS, group=GROUP, updates=UPDATES, max_new_tokens=MAX_NEW_TOKENS,
                               steps=warmup + steps, kl=KL, callbacks=[clock], use_cpu=device == "cpu")
        trainer.remove_callback(PrinterCallback)  # it prints every log dict
        torch.set_num_threads(threads)  # transformers' setup may have changed it
        trainer.train()
    times = [b - a for a, b in zip(clock.marks, clock.marks[1:])]
    return Side("TRL", times[warmup:], clock.gen_tokens[warmup:])


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="measured steps on each side (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="steps run first and not measured (default 1)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads for both sides")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error(f"--steps must be >= 1 and --warmup >= 0, got --steps {args.steps} --warmup {args.warmup}")
    import transformers
    import trl as trl_package

    print(f"device {args.device}, torch {torch.__version__}, {args.threads} threads, trl {trl_package.__version__}, "
          f"transformers {transformers.__version__}\n{ROLLOUTS} rollouts ({PROMPTS} prompts x {GROUP}) of up to "
          f"{MAX_NEW_TOKENS} tokens per step, {UPDATES} updates of {ROLLOUTS // UPDATES}, KL beta {KL}; "
          f"{args.warmup} warm-up + {args.steps} measured steps each\n")
    sides = [yardstick(args.steps, args.warmup, args.threads, args.device),
             trl(args.steps, args.warmup, args.threads, args.device)]
    for side in sides:
        per_step = ", ".join(f"{s:.2f}" for s in side.step_s)
        print(f"{side.name:<10} {side.s_per_step:7.2f} s/step (median of {per_step})   "
              f"{statistics.mean(side.gen_tokens):8,.0f} generated tokens/step   {side.tokens_per_s:8,.0f} tok/s")
    ours, theirs = sides
    ratio = ours.tokens_per_s / theirs.tokens_per_s  # = TRL's seconds per generated token / Yardstick's
    verdict = "meets" if ratio >= GOAL else "below"
    print(f"\nper generated token Yardstick is {ratio:.2f}x TRL ({verdict} goal {GOAL:g}x); "
          f"per step {theirs.s_per_step / ours.s_per_step:.2f}x")


if __name__ == "__main__":
    main()

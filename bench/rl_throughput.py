"""Throughput of the RL core, each figure as a ratio against a reference measured in the same run.

    python bench/rl_throughput.py [--threads N] [--device cpu|cuda] [--base-dir DIR]

Prints, never asserts on time:
  1. sampling tokens/s with the KV cache vs without it          (goal: >= 10x)
  2. training tokens/s and model FLOPs utilisation against the
     fp32 2048x2048 matmul rate measured here                    (goal: >= 0.6)
  3. generation inside a GRPO step (rollout: sampling, the sampler's
     log-probs, decoding, scoring) vs the sampler alone drawing the
     same tokens for the same rows                               (goal: >= 0.85)
     and, for scale, vs every row sampled to the mean length with
     none stopping (the cost of rows that end at different times)
  4. the train phase of a GRPO step vs plain training (2.), in
     tokens trained per second                                   (goal: >= 0.6)
  5. evaluation (greedy pass@1, the sampler's batched path): its
     seconds and its share of wall time at eval_every steps
Where the step's time goes: --profile prints torch.profiler's top operators of one step's
generation and of its update.
The policy is the default-size GPT. Without --base-dir holding a base-arithmetic.pt,
it is freshly initialised (throughput does not depend on what it learned), so
its completions run to max_new_tokens. Other work on the machine skews every figure;
each measurement is the best of a few repeats to damp that.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.rl import TrainConfig, Trainer  # noqa: E402
from trainer.rl.model import GPT, GPTConfig, sample  # noqa: E402
from trainer.rl.pretrain import atomic_save, base_checkpoint_path  # noqa: E402
from trainer.rl.vocab import EOS_ID, VOCAB_SIZE, encode_prompts  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_time(fn, device: str, repeats: int = 3) -> float:
    fn()  # warm up
    sync(device)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - started)
    return min(times)


def matmul_flops(device: str, n: int = 2048) -> float:
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    reps = 4
    seconds = best_time(lambda: [a @ b for _ in range(reps)], device, repeats=3)
    return 2 * n**3 * reps / seconds


def line(name: str, value: str, ratio: float, goal: float, reference: str) -> None:
    verdict = "meets" if ratio >= goal else "below"
    print(f"{name:<34} {value:>22}   ratio {ratio:6.2f} vs {reference} ({verdict} goal {goal:g})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--base-dir", type=Path, default=None)
    ap.add_argument("--batch", type=int, default=64, help="rows for the sampling comparison")
    ap.add_argument("--new-tokens", type=int, default=64, help="new tokens for the sampling comparison")
    ap.add_argument("--profile", action="store_true", help="print where one GRPO step's time goes")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    torch.manual_seed(0)
    config = GPTConfig()
    model = GPT(config).to(device)
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"policy {model.num_params() / 1e6:.2f}M parameters {dataclasses.asdict(config)}\n")

    # ---- reference: fp32 matmul rate -------------------------------------------------
    peak = matmul_flops(device)
    print(f"{'fp32 2048x2048 matmul':<34} {peak / 1e9:>15.1f} GFLOP/s   (reference for MFU)")

    # ---- 1. KV cache vs no cache ---------------------------------------------------------
    prompt = torch.randint(0, VOCAB_SIZE, (args.batch, 8), device=device)
    g = torch.Generator(device=device)
    new = args.new_tokens

    def run(use_cache: bool):
        g.manual_seed(0)
        sample(model, prompt, new, temperature=1.0, generator=g, use_cache=use_cache)

    cached_s = best_time(lambda: run(True), device)
    uncached_s = best_time(lambda: run(False), device, repeats=1)
    tokens = args.batch * new
    bare_rate = tokens / cached_s
    line(f"sampling, KV cache ({args.batch}x{new} new)", f"{bare_rate:,.0f} tok/s", bare_rate / (tokens / uncached_s), 10,
         f"no cache {tokens / uncached_s:,.0f} tok/s")

    # ---- 2. training throughput and MFU ---------------------------------------------------
    B, T = 256, 32
    idx = torch.randint(0, VOCAB_SIZE, (B, T + 1), device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_once():
        logits = model(idx[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    train_s = best_time(train_once, device)
    train_rate = B * T / train_s
    achieved = train_rate * model.flops_per_token(T)
    line(f"training ({B}x{T} tokens/step)", f"{train_rate:,.0f} tok/s", achieved / peak, 0.6,
         f"matmul, {achieved / 1e9:.1f} GFLOP/s model FLOPs")

    # ---- 3. generation inside a GRPO step vs bare sampling ----------------------------------
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = args.base_dir
        if base_dir is None or not base_checkpoint_path("arithmetic", base_dir).exists():
            base_dir = Path(tmp)
            atomic_save({"model_config": dataclasses.asdict(config),
                         "model": {k: v.cpu() for k, v in model.state_dict().items()}},
                        base_checkpoint_path("arithmetic", base_dir))
        cfg = TrainConfig(env="arithmetic", eval_size=8, torch_threads=args.threads)
        trainer = Trainer(cfg, base_dir, device)
        trainer.train_step()  # warm up
        rates, lengths = [], []
        for _ in range(3):
            m = trainer.train_step().metrics
            rates.append(m["performance/gen_tokens_per_s"])
            lengths.append(round(m["performance/gen_tokens"] / (cfg.prompts_per_step * cfg.group_size)))
        rows = cfg.prompts_per_step * cfg.group_size
        in_step = max(rates)

        # The same rows drawn by the sampler alone: the step's prompts and sampling seed, so the same tokens.
        prompt_state, sample_state = trainer.prompt_generator.get_state(), trainer.sample_generator.get_state()
        prompts = trainer.env.sample_train_prompts(cfg.prompts_per_step, trainer.prompt_generator)
        same_rows = encode_prompts([p for p in prompts for _ in range(cfg.group_size)], trainer.env.prompt_width)
        same_rows = same_rows.to(device)
        drawn = []

        def alone():
            trainer.sample_generator.set_state(sample_state)
            drawn.append(sample(trainer.policy, same_rows, cfg.max_new_tokens, temperature=cfg.temperature,
                                top_k=cfg.top_k, stop_tokens=(EOS_ID,), generator=trainer.sample_generator))

        def in_a_step():
            trainer.prompt_generator.set_state(prompt_state)
            trainer.sample_generator.set_state(sample_state)
            drawn.append(trainer.collect())

        alone_s = best_time(alone, device)
        step_s = best_time(in_a_step, device)
        same_tokens = int(drawn[-1].rollout.sampled.sum())
        assert same_tokens == int(drawn[0].sampled.sum()), "the step drew other tokens than the sampler alone"
        step_rate = same_tokens / step_s
        line(f"generation in a GRPO step ({rows} rows)", f"{step_rate:,.0f} tok/s", step_rate * alone_s / same_tokens,
             0.85, f"the sampler alone on the same rows {same_tokens / alone_s:,.0f} tok/s")

        # Every row sampled to the mean length, none stopping: what a batch without ragged ends would give.
        steps = max(1, max(lengths))
        bare_prompt = torch.randint(0, VOCAB_SIZE, (rows, trainer.env.prompt_width), device=device)

        def bare():
            g.manual_seed(0)
            sample(trainer.policy, bare_prompt, steps, temperature=1.0, generator=g)

        bare_step_rate = rows * steps / best_time(bare, device)
        print(f"{'  (rows run to the longest one)':<34} {in_step:>15,.0f} tok/s   ratio {in_step / bare_step_rate:6.2f} "
              f"vs every row to the mean length, none stopping {bare_step_rate:,.0f} tok/s ({rows}x{steps})")

        # ---- 4. the train phase vs plain training -------------------------------------------
        train_in_step = max(trainer.train_step().metrics["performance/train_tokens_per_s"] for _ in range(2))
        line(f"train phase of a GRPO step (kl {cfg.kl_coef:g})", f"{train_in_step:,.0f} tok/s",
             train_in_step / train_rate, 0.6, f"plain training {train_rate:,.0f} tok/s")
        no_kl = Trainer(dataclasses.replace(cfg, kl_coef=0.0), base_dir, device)
        no_kl.train_step()
        train_no_kl = max(no_kl.train_step().metrics["performance/train_tokens_per_s"] for _ in range(2))
        line("train phase, kl 0 (no reference pass)", f"{train_no_kl:,.0f} tok/s", train_no_kl / train_rate, 0.6,
             f"plain training {train_rate:,.0f} tok/s")
        print(f"\nGRPO step: generate {m['timing/generate_s']:.2f} s, score {m['timing/score_s']:.3f} s, "
              f"train {m['timing/train_s']:.2f} s, total {m['timing/step_s']:.2f} s; "
              f"train {m['performance/train_tokens_per_s']:,.0f} tok/s")

        # ---- 5. evaluation ------------------------------------------------------------------
        evaluator = Trainer(dataclasses.replace(cfg, eval_size=TrainConfig.eval_size), base_dir, device)
        eval_s = min(evaluator.evaluate()["timing/eval_s"] for _ in range(2))
        every = cfg.eval_every
        share = eval_s / (eval_s + every * m["timing/step_s"])
        print(f"evaluation: {evaluator.config.eval_size} prompts in {eval_s:.2f} s; every "
              f"{every} steps of {m['timing/step_s']:.2f} s it takes {share:.1%} of the wall time")

        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            batch = None
            for phase in ("generation (collect)", "update"):
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    if batch is None:
                        batch = trainer.collect()
                    else:
                        trainer.update(batch)
                print(f"\n-- {phase}: top operators by self time")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))

if __name__ == "__main__":
    main()

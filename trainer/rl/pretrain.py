"""Base policies: a short supervised warm start on each environment's demonstrations.

RL needs a policy that already speaks the format and is right only some of
the time. `pretrain` trains a fresh GPT on generated demonstrations and stops
as soon as greedy pass@1 on a probe set of training prompts reaches
`target_pass1` (the environment's `warm_start_target`, 30 unless it says
otherwise), or after `max_steps`. The result is cached in
`cache_dir` as base-<env>.pt; `ensure_base_checkpoint` builds it on first use
and afterwards just returns the path, whatever size of model the file holds
(tests put a tiny base there first).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path
from typing import Callable

import torch

from trainer.rl.envs import get_env
from trainer.rl.model import GPT, GPTConfig
from trainer.rl.rollout import pass_at_1
from trainer.rl.vocab import EOS, PAD_ID, encode

FORMAT = "yardstick-base/1"

# progress(step, max_steps, {"loss": ..., "pass1": ... (only when probed)})
Progress = Callable[[int, int, dict], None]


def base_checkpoint_path(env_name: str, cache_dir: Path) -> Path:
    return Path(cache_dir) / f"base-{env_name}.pt"


def ensure_base_checkpoint(env_name: str, cache_dir: Path, device: str = "cpu", progress: Progress | None = None, **pretrain_kwargs) -> Path:
    """Return the cached base checkpoint of `env_name`, pretraining it first if missing."""
    path = base_checkpoint_path(env_name, cache_dir)
    if path.exists():
        return path
    return pretrain(env_name, cache_dir, device, progress=progress, **pretrain_kwargs)


def pretrain(
    env_name: str,
    cache_dir: Path,
    device: str = "cpu",
    progress: Progress | None = None,
    *,
    model_config: GPTConfig | None = None,
    max_steps: int = 1500,
    batch_size: int = 128,
    lr: float = 2e-3,
    target_pass1: float | None = None,
    probe_every: int = 10,
    probe_size: int = 200,
    seed: int = 0,
) -> Path:
    """Train a base policy for `env_name`, save it atomically as base-<env>.pt, return its path."""
    env = get_env(env_name)
    config = model_config or GPTConfig()
    if target_pass1 is None:
        target_pass1 = env.warm_start_target
    torch.manual_seed(seed)
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    warmup = 20
    sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    rng = random.Random(seed)
    probe = env.prompts(probe_size, random.Random(seed + 1), "train")
    max_new = config.block_size - env.prompt_width
    started = time.perf_counter()
    pass1 = 0.0
    step = 0
    while step < max_steps:
        x, y, mask = demonstration_batch(env, env.prompts(batch_size, rng, "train"), rng, device)
        logits = model(x)  # (B, T, vocab)
        loss_tok = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
        loss = (loss_tok * mask.flatten()).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        sched.step()
        step += 1
        info = {"loss": loss.item(), "elapsed_s": time.perf_counter() - started}
        if step % probe_every == 0 or step == max_steps:
            pass1 = pass_at_1(model, env, probe, max_new_tokens=max_new, device=device)
            info["pass1"] = pass1
        if progress is not None:
            progress(step, max_steps, info)
        if "pass1" in info and pass1 >= target_pass1:
            break

    path = base_checkpoint_path(env_name, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "format": FORMAT,
        "env": env_name,
        "model_config": dataclasses.asdict(config),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "steps": step,
        "probe_pass1": pass1,
    }
    atomic_save(state, path)
    return path


def demonstration_batch(env, prompts: list[str], rng: random.Random, device):
    """Return inputs, targets (B, T) and a float loss mask (B, T) over policy-written tokens."""
    rows, masks = [], []
    for p in prompts:
        ids = encode(p)
        ids = [PAD_ID] * (env.prompt_width - len(ids)) + ids
        trained = [False] * len(ids)
        for text, by_policy in env.demonstration(p, rng) + [(EOS, True)]:
            piece = encode(text)
            ids += piece
            trained += [by_policy] * len(piece)
        rows.append(ids)
        masks.append(trained)
    width = max(len(r) for r in rows)
    tokens = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], device=device)  # (B, T+1)
    mask = torch.tensor([m + [False] * (width - len(m)) for m in masks], device=device)
    return tokens[:, :-1], tokens[:, 1:], mask[:, 1:].float()


def atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary file beside `path`, then rename it over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)

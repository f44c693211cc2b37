"""GRPO post-training of a base policy on one environment, one step at a time.

The job runner drives a `Trainer`: `evaluate()` before the first step and
every `eval_every` steps, `train_step()` in a loop, `save_checkpoint()` now and
then, `from_checkpoint()` to resume. A step reads top to bottom:

    rollout     P prompts x G completions from the policy (B = P * G rows)
    reward      the environment scores every completion
    advantages  (r - group mean) / (group std + eps), per prompt group
    update      clipped-ratio policy loss + k3 KL to the frozen base, AdamW
    log         StepResult: metrics and a few samples

Randomness comes from two explicit generators stored in the state dict (prompt
choice on the CPU, token sampling on the device), so a resumed run repeats an
uninterrupted one exactly and evaluation (greedy) or timing cannot disturb it.

A Trainer given `ranks` (trainer.rl.distributed.Ranks) is one of W processes
training one policy: it rolls out its share of the step's prompts, and the
update and the metrics cover the whole batch (see that module). Without
`ranks` nothing here talks to another process.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from trainer.rl.config import ConfigError, TrainConfig
from trainer.rl.envs import get_env
from trainer.rl.grpo import entropy, group_advantages, grpo_loss, masked_mean, token_logprobs
from trainer.rl.model import GPT, GPTConfig
from trainer.rl.pretrain import atomic_save, ensure_base_checkpoint
from trainer.rl.rollout import Rollout, pass_at_1, rewards, rollout

if TYPE_CHECKING:
    from trainer.rl.distributed import Ranks

FORMAT = "yardstick-trainer/1"
# Rank r > 0 of a run on several devices samples with seed + 1 + r * this (mod 2**64): apart from
# rank 0's seed + 1 (a one-device run's) and from every other rank's, for any seed.
RANK_SEED_STRIDE = 0x9E3779B97F4A7C15


@dataclass
class StepResult:
    step: int  # updates completed, this one included
    metrics: dict[str, float]
    samples: list[dict] = field(default_factory=list)  # {"prompt", "completion", "reward", "advantage", "tool_calls"}


@dataclass
class Batch:
    """One step's rollouts and rewards on this process: the first half of a step (`Trainer.collect`)."""

    first_prompt: int  # index of prompts[0] among the step's P prompts (0 on one process)
    prompts: list[str]  # this process's prompts: whole groups
    rollout: Rollout  # G rows per prompt, each prompt's group adjacent
    reward: torch.Tensor  # (b,) on the CPU, b = len(prompts) * G
    started: float  # perf_counter() when the step began
    generate_s: float
    score_s: float


@dataclass
class _Rows:
    """What the step's log needs of every row of the batch; `join` puts every process's together."""

    prompts: list[str]
    completions: list[str]
    finished: list[bool]
    tool_calls: list[int]
    reward: torch.Tensor  # (B,)
    advantages: torch.Tensor  # (B,)
    gen_tokens: int
    train_tokens: int  # positions scored per pass of the update
    generate_s: float
    score_s: float

    @classmethod
    def join(cls, parts: list["_Rows"]) -> "_Rows":
        """All processes' rows in rank order (the order one process would have them in); the slowest
        one's timings."""
        return cls(
            prompts=[x for p in parts for x in p.prompts],
            completions=[x for p in parts for x in p.completions],
            finished=[x for p in parts for x in p.finished],
            tool_calls=[x for p in parts for x in p.tool_calls],
            reward=torch.cat([p.reward for p in parts]),
            advantages=torch.cat([p.advantages for p in parts]),
            gen_tokens=sum(p.gen_tokens for p in parts),
            train_tokens=sum(p.train_tokens for p in parts),
            generate_s=max(p.generate_s for p in parts),
            score_s=max(p.score_s for p in parts),
        )


class Trainer:
    def __init__(self, config: TrainConfig, base_dir: Path, device: str = "cpu", ranks: "Ranks | None" = None):
        """Start a run from the base policy of config.env, pretraining it into base_dir if missing."""
        path = ensure_base_checkpoint(config.env, Path(base_dir), device)
        base = torch.load(path, map_location="cpu", weights_only=True)
        self._setup(config, device, base["model_config"], base["model"], ranks)

    @classmethod
    def from_origin(cls, origin: dict, device: str = "cpu", ranks: "Ranks | None" = None) -> "Trainer":
        """Build a Trainer from a JSON-safe description of where the run starts, the one every rank
        of a run on several devices is given:

            {"checkpoint": path, "base_dir": dir}   resume from a checkpoint (from_checkpoint)
            {"policy": path, "config": {...}}       a new run from another run's policy (from_policy)
            {"config": {...}, "base_dir": dir}      a new run from the environment's base policy
        """
        if "checkpoint" in origin:
            return cls.from_checkpoint(Path(origin["checkpoint"]), Path(origin["base_dir"]), device, ranks)
        config = TrainConfig.from_dict(origin["config"])
        if "policy" in origin:
            return cls.from_policy(config, Path(origin["policy"]), device, ranks)
        return cls(config, Path(origin["base_dir"]), device, ranks)

    @classmethod
    def from_policy(cls, config: TrainConfig, path: Path, device: str = "cpu",
                    ranks: "Ranks | None" = None) -> "Trainer":
        """Start a new run (step 0, fresh optimizer and schedule) from the policy saved in `path`: a
        trainer checkpoint of another run, on this environment or another (the vocabulary is shared).

        That policy is also the run's KL reference: the run is pulled towards where it started, not
        towards the base policy of its environment.
        """
        sd = torch.load(path, map_location="cpu", weights_only=True)
        trainer = cls.__new__(cls)
        trainer._setup(config, device, sd["model_config"], sd["model"], ranks)
        return trainer

    def _setup(self, config: TrainConfig, device: str, model_config: dict, base_weights: dict,
               ranks: "Ranks | None" = None) -> None:
        if config.torch_threads > 0:  # at most the cores this process may use, on whatever machine runs it
            torch.set_num_threads(min(config.torch_threads, len(os.sched_getaffinity(0))))
        random.seed(config.seed)
        torch.manual_seed(config.seed)  # also seeds every CUDA device
        self.config = config
        self.device = device
        self.ranks = ranks
        if ranks is not None and config.prompts_per_step < ranks.world:
            raise ConfigError(
                "prompts_per_step",
                f"prompts_per_step must be at least the devices ({ranks.world}): each device rolls out whole "
                f"prompt groups, got {config.prompts_per_step}",
            )
        self.env = get_env(config.env)
        self.model_config = GPTConfig(**model_config)
        room = self.model_config.block_size - self.env.prompt_width
        if config.max_new_tokens > room:
            raise ConfigError(
                "max_new_tokens",
                f"max_new_tokens must be <= {room} for {config.env} (the policy sees {self.model_config.block_size} "
                f"tokens, {self.env.prompt_width} of them prompt), got {config.max_new_tokens}",
            )
        self.policy = GPT(self.model_config).to(device)
        self.policy.load_state_dict(base_weights)
        self.reference = GPT(self.model_config).to(device)
        self.reference.load_state_dict(base_weights)
        self.reference.requires_grad_(False)

        decay = [p for p in self.policy.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.policy.parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=config.lr,
            betas=(0.9, 0.99),
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _lr_factor(config))

        # Every rank draws the same prompts (one state, kept equal); each samples with its own generator.
        self.prompt_generator = torch.Generator().manual_seed(config.seed)
        rank = 0 if ranks is None else ranks.rank
        self.sample_generator = torch.Generator(device=device).manual_seed(
            (config.seed + 1 + rank * RANK_SEED_STRIDE) % 2**64)
        self.step = 0
        self.tokens_total = 0  # generated tokens over the whole run, resumes included
        self.eval_prompts = self.env.eval_prompts(config.eval_size)

    # ------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """Return {"eval/pass1": points 0..100, "timing/eval_s": s}: greedy pass@1 on the held-out prompts."""
        started = time.perf_counter()
        pass1 = pass_at_1(
            self.policy, self.env, self.eval_prompts, max_new_tokens=self.config.max_new_tokens, device=self.device
        )
        return {"eval/pass1": pass1, "timing/eval_s": time.perf_counter() - started}

    def train_step(self) -> StepResult:
        """Run one GRPO step (rollout, reward, advantages, update) and return its metrics."""
        return self.update(self.collect())

    def collect(self) -> Batch:
        """The step's first half: rollouts of this process's prompts and their rewards."""
        cfg = self.config
        P, G = cfg.prompts_per_step, cfg.group_size
        step_started = time.perf_counter()

        # ---- rollout -----------------------------------------------------------------
        prompts = self.env.sample_train_prompts(P, self.prompt_generator)  # P prompts, the same on every rank
        first = 0
        if self.ranks is not None:
            first, last = self.ranks.share(P)
            prompts = prompts[first:last]  # this rank's p prompts: its groups are whole
        ro = rollout(
            self.policy,
            self.env,
            [p for p in prompts for _ in range(G)],  # b = p * G rows, each prompt's group adjacent
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            generator=self.sample_generator,
            device=self.device,
            logprobs=True,  # the update's old log-probs, scored as they were drawn
        )  # ro.tokens, ro.sampled, ro.logprobs: (b, L)
        generate_s = time.perf_counter() - step_started

        # ---- reward ------------------------------------------------------------------
        started = time.perf_counter()
        reward = torch.tensor(rewards(self.env, ro), dtype=torch.float32)  # (b,) on the CPU
        score_s = time.perf_counter() - started
        return Batch(first_prompt=first, prompts=prompts, rollout=ro, reward=reward, started=step_started,
                     generate_s=generate_s, score_s=score_s)

    def update(self, batch: Batch) -> StepResult:
        """The step's second half: advantages, the update (over every rank's rows), the metrics."""
        cfg = self.config
        P, G = cfg.prompts_per_step, cfg.group_size
        B = P * G  # rows of the step, on all ranks together
        ranks = self.ranks
        ro, reward = batch.rollout, batch.reward
        p = len(batch.prompts)
        b = p * G  # rows here (B on one process)
        first_row = batch.first_prompt * G  # this rank's first row among the step's B

        # ---- advantages ---------------------------------------------------------------
        started = time.perf_counter()
        advantages = group_advantages(reward.view(p, G)).view(b)  # (b,): groups are never split between ranks

        # ---- update ------------------------------------------------------------------
        lr = self.optimizer.param_groups[0]["lr"]
        inputs = ro.tokens[:, :-1]  # (b, L-1)
        targets = ro.tokens[:, 1:]  # (b, L-1): token t+1 is predicted at position t
        mask = ro.sampled[:, 1:]  # (b, L-1): train only on tokens the policy chose
        adv = advantages.to(self.device)  # (b,)
        temperature = cfg.temperature  # score tokens under the distribution they were sampled from
        ref_logp = None  # kl_coef 0: no KL term, so no forward pass of the reference
        if cfg.kl_coef > 0:
            # A minibatch of rows at a time, as the update's passes: the whole step's rows at once made tensors
            # past glibc's 32 MiB mmap limit (a MLP activation of 1,024 rows of 47 positions is 98 MiB), each
            # mapped afresh and faulted in page by page, three times the page faults of the rest of the update.
            m = cfg.minibatch_size
            with torch.no_grad():
                ref_logp = torch.cat([token_logprobs(self.reference(inputs[i : i + m]) / temperature, targets[i : i + m])
                                      for i in range(0, b, m)])  # (b, L-1)
        # Minibatches are drawn over the whole step's B rows, so W ranks update on the same rows as one would.
        minibatches = [torch.arange(i, min(i + cfg.minibatch_size, B)) for i in range(0, B, cfg.minibatch_size)]
        updates = cfg.inner_epochs * len(minibatches)
        # The policy moves during the step when it updates more than once: the ratio's denominator is its
        # log-probs before the first update, which the sampler kept as it drew each token (no forward pass).
        old_logp = ro.logprobs[:, 1:] if updates > 1 else None  # (b, L-1)
        sums = {"loss": 0.0, "entropy": 0.0, "clip_ratio": 0.0, "grad_norm": 0.0}
        if ref_logp is not None:
            sums["kl"] = 0.0
        for _epoch in range(cfg.inner_epochs):
            order = minibatches
            if len(minibatches) > 1:
                perm = torch.randperm(B, generator=self.prompt_generator)
                order = [perm[mb] for mb in minibatches]
            for rows in order:
                if ranks is not None:
                    rows = ranks.mine(rows, first_row, b)  # the minibatch's rows held here, as local indices
                rows = rows.to(self.device)
                # One process: each mean is over its own mask. Ranks: over the minibatch's tokens on all of them.
                tokens = None if ranks is None else ranks.sum(mask[rows].sum())
                logits = self.policy(inputs[rows]) / temperature  # (m, L-1, vocab)
                logp = token_logprobs(logits, targets[rows])  # (m, L-1)
                old = logp.detach() if old_logp is None else old_logp[rows]
                loss, stats = grpo_loss(
                    logp, old, None if ref_logp is None else ref_logp[rows], adv[rows], mask[rows],
                    clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef, tokens=tokens,
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if ranks is not None:
                    # Each rank's loss is its share of the minibatch's token mean: the sum is the gradient of
                    # the whole minibatch, whatever the ranks' token counts. Then every rank steps alike.
                    ranks.sum_gradients(self.policy)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    ent = masked_mean(entropy(logits.detach()), mask[rows], tokens)
                parts = {"loss": loss.detach(), "entropy": ent, "grad_norm": grad_norm, **stats}
                for key in sums:
                    sums[key] += float(parts[key]) / updates
        if ranks is not None:  # the shares of each mean add up; grad_norm is already the whole batch's
            shares = [k for k in ("loss", "kl", "entropy", "clip_ratio") if k in sums]
            whole = ranks.sum(torch.tensor([sums[k] for k in shares], dtype=torch.float64, device=self.device))
            sums.update(zip(shares, whole.tolist()))
        self.scheduler.step()
        self.step += 1
        train_s = time.perf_counter() - started

        # ---- log ---------------------------------------------------------------------
        whole = _Rows(prompts=ro.prompts, completions=ro.completions, finished=ro.finished, tool_calls=ro.tool_calls,
                      reward=reward, advantages=advantages, gen_tokens=ro.gen_tokens, train_tokens=inputs.numel(),
                      generate_s=batch.generate_s, score_s=batch.score_s)
        if ranks is not None:
            whole = _Rows.join(ranks.gather(whole))  # the whole batch's B rows, on every rank
        gen_tokens = whole.gen_tokens
        reward, advantages = whole.reward, whole.advantages  # (B,)
        by_group = reward.view(P, G)  # (P, G)
        self.tokens_total += gen_tokens
        step_s = time.perf_counter() - batch.started
        metrics = {
            "train/reward_mean": reward.mean().item(),
            "train/reward_std": reward.std().item(),
            "train/reward_min": reward.min().item(),
            "train/reward_max": reward.max().item(),
            "train/frac_reward_zero_std": (by_group.std(dim=1) == 0).float().mean().item(),
            "train/loss": sums["loss"],
            **({"train/kl": sums["kl"]} if "kl" in sums else {}),  # none without a reference (kl_coef 0)
            "train/entropy": sums["entropy"],
            "train/clip_ratio": sums["clip_ratio"],
            "train/grad_norm": sums["grad_norm"],
            "train/lr": lr,
            "train/response_length_mean": gen_tokens / B,
            "train/truncated_rate": 1.0 - sum(whole.finished) / B,
            "train/tool_calls_mean": sum(whole.tool_calls) / B,
            "performance/gen_tokens": float(gen_tokens),
            "performance/gen_tokens_per_s": gen_tokens / max(whole.generate_s, 1e-9),
            "performance/train_tokens_per_s": cfg.inner_epochs * whole.train_tokens / max(train_s, 1e-9),
            "performance/train_tokens": float(cfg.inner_epochs * whole.train_tokens),  # positions the update trained
            "performance/tokens_total": float(self.tokens_total),
            # Estimated model FLOPs (model.flops_per_token): forward and backward of every position trained, a
            # forward of every token generated; the reference's and other recomputations are not counted.
            "performance/model_flops": self.policy.flops_per_token(inputs.size(1)) * (
                cfg.inner_epochs * whole.train_tokens + whole.gen_tokens / 3),
            "timing/generate_s": whole.generate_s,
            "timing/score_s": whole.score_s,
            "timing/train_s": train_s,
            "timing/step_s": step_s,
        }
        # One sample from each of the first prompts, then second completions, ...
        picked = [(i % P) * G + i // P for i in range(min(cfg.samples_per_step, B))]
        samples = [
            {
                "prompt": whole.prompts[r],
                "completion": whole.completions[r],
                "reward": reward[r].item(),
                "advantage": advantages[r].item(),
                "tool_calls": whole.tool_calls[r],
            }
            for r in picked
        ]
        return StepResult(step=self.step, metrics=metrics, samples=samples)

    # ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Return everything a resume needs: weights, optimizer, schedule, step, config and RNG states.

        With ranks, every rank calls it at once (it gathers every rank's RNG states, "rng_ranks") and
        rank 0 writes it.
        """
        sd = {
            "format": FORMAT,
            "config": self.config.to_dict(),
            "model_config": dataclasses.asdict(self.model_config),
            "step": self.step,
            "tokens_total": self.tokens_total,
            "model": self.policy.state_dict(),
            "reference": self.reference.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": self._rng_state(),
        }
        if self.ranks is not None:
            sd["world_size"] = self.ranks.world
            sd["rng_ranks"] = self.ranks.gather(sd["rng"])  # rank r's at [r]
        return sd

    def _rng_state(self) -> dict:
        return {
            "torch_cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": random.getstate(),
            "prompt_generator": self.prompt_generator.get_state(),
            "sample_generator": self.sample_generator.get_state(),
        }

    def load_state_dict(self, sd: dict) -> None:
        """Restore a state_dict() taken from a run with the same environment and model size."""
        if sd.get("format") != FORMAT:
            raise ValueError(f"not a trainer checkpoint: format {sd.get('format')!r}, expected {FORMAT!r}")
        world = 1 if self.ranks is None else self.ranks.world
        if sd.get("world_size", 1) != world:
            raise ValueError(f"the checkpoint at step {sd['step']} was written by a run on {sd.get('world_size', 1)} "
                             f"device(s) and can only be resumed on as many, not on {world}")
        self.policy.load_state_dict(sd["model"])
        self.reference.load_state_dict(sd["reference"])
        self.optimizer.load_state_dict(sd["optimizer"])
        self.scheduler.load_state_dict(sd["scheduler"])
        self.step = int(sd["step"])
        self.tokens_total = int(sd["tokens_total"])
        rng = sd["rng"] if self.ranks is None else sd["rng_ranks"][self.ranks.rank]
        torch.set_rng_state(rng["torch_cpu"].cpu())
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
        random.setstate(_as_tuples(rng["python"]))
        self.prompt_generator.set_state(rng["prompt_generator"].cpu())
        self.sample_generator.set_state(rng["sample_generator"].cpu())

    def save_checkpoint(self, path: Path) -> None:
        """Write state_dict() to path atomically (a temporary file renamed over it)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_save(self.state_dict(), Path(path))

    @classmethod
    def from_checkpoint(cls, path: Path, base_dir: Path, device: str = "cpu",
                        ranks: "Ranks | None" = None) -> "Trainer":
        """Return a Trainer resumed from a checkpoint written by save_checkpoint.

        The checkpoint carries its own reference weights; base_dir is only
        used, to rebuild the base policy, when it does not.
        """
        sd = torch.load(path, map_location="cpu", weights_only=True)
        config = TrainConfig.from_dict(sd["config"])
        if "reference" not in sd:
            trainer = cls(config, base_dir, device, ranks)
        else:
            trainer = cls.__new__(cls)
            trainer._setup(config, device, sd["model_config"], sd["reference"], ranks)
        trainer.load_state_dict(sd)
        return trainer


def _lr_factor(config: TrainConfig):
    """Return step -> multiplier of config.lr: linear warmup, then constant or cosine to 10%."""
    warmup, total, schedule = config.warmup_steps, config.steps, config.lr_schedule

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def _as_tuples(state):
    """random.setstate needs tuples; a checkpoint round trip may hand back lists."""
    if isinstance(state, (list, tuple)):
        return tuple(_as_tuples(s) for s in state)
    return state

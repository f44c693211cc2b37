"""Episodes: the policy writes completions for an environment's prompts.

`rollout` runs one batched, possibly multi-turn generation (tool calls are
answered by the environment mid-generation) and decodes it; `rewards` scores
it; `pass_at_1` is the greedy held-out evaluation in points 0..100.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.rl.envs import Environment
from trainer.rl.model import GPT, GPTConfig, sample
from trainer.rl.vocab import CALC_END_ID, EOS_ID, decode, encode, encode_prompts


@dataclass
class Rollout:
    prompts: list[str]
    tokens: torch.Tensor  # (B, L) prompt, then completion incl. tool results; PAD after the end
    sampled: torch.Tensor  # (B, L) bool: tokens the policy chose (the only ones trained on)
    completions: list[str]  # text after the prompt, tool results included, EOS excluded
    finished: list[bool]  # ended with EOS within max_new_tokens
    tool_calls: list[int]  # calculator calls made by each row
    prompt_len: int
    logprobs: torch.Tensor | None = None  # (B, L): the sampler's log p of each sampled token (model.Sample)

    @property
    def gen_tokens(self) -> int:
        return int(self.sampled.sum().item())


def rollout(
    model: GPT,
    env: Environment,
    prompts: list[str],
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int = 0,
    generator: torch.Generator | None = None,
    device: str | torch.device = "cpu",
    logprobs: bool = False,
) -> Rollout:
    """Generate one completion per prompt (B = len(prompts)); temperature 0 is greedy. With `logprobs`,
    keep the sampler's log-probability of each token it sampled (see model.sample)."""
    idx = encode_prompts(prompts, env.prompt_width).to(device)  # (B, P)
    on_tool = None
    if env.max_tool_calls:

        def on_tool(row: int, completion_ids: list[int]) -> list[int]:
            return encode(env.tool_result(decode(completion_ids)))

    s = sample(
        model,
        idx,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        stop_tokens=(EOS_ID,),
        generator=generator,
        tool_token=CALC_END_ID if on_tool else None,
        on_tool=on_tool,
        logprobs=logprobs,
    )
    P = s.prompt_len
    completions, tool_calls = [], []
    for row in s.tokens[:, P:].tolist():
        if EOS_ID in row:
            row = row[: row.index(EOS_ID)]
        completions.append(decode(row))
        tool_calls.append(row.count(CALC_END_ID))
    return Rollout(
        prompts=list(prompts),
        tokens=s.tokens,
        sampled=s.sampled,
        completions=completions,
        finished=s.finished.tolist(),
        tool_calls=tool_calls,
        prompt_len=P,
        logprobs=s.logprobs,
    )


def rewards(env: Environment, ro: Rollout) -> list[float]:
    """Score each row; a row that never ended (truncated) earns 0 without being scored."""
    return [env.score(p, c) if done else 0.0 for p, c, done in zip(ro.prompts, ro.completions, ro.finished)]


@torch.no_grad()
def pass_at_1(
    model: GPT, env: Environment, prompts: list[str], *, max_new_tokens: int, device="cpu", batch_size: int = 500
) -> float:
    """Return the share of prompts solved exactly by greedy decoding, in points 0..100.

    Uses no random number generator at all, so it cannot disturb training.
    """
    solved = 0
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        ro = rollout(model, env, chunk, max_new_tokens=max_new_tokens, temperature=0.0, device=device)
        solved += sum(r == 1.0 for r in rewards(env, ro))
    return 100.0 * solved / max(1, len(prompts))


@torch.no_grad()
def policy_pass_at_1(path, env: Environment, eval_size: int, *, max_new_tokens: int = 40, device="cpu") -> float:
    """Greedy pass@1 (points 0..100) on the first `eval_size` held-out prompts of `env` of the policy saved
    in `path`, a base checkpoint or a trainer checkpoint (both keep "model" and "model_config"); the same
    prompts on every call. `max_new_tokens` is capped at what the policy's context leaves after a prompt."""
    sd = torch.load(path, map_location="cpu", weights_only=True)
    config = GPTConfig(**sd["model_config"])
    model = GPT(config).to(device)
    model.load_state_dict(sd["model"])
    model.eval()
    room = config.block_size - env.prompt_width
    return pass_at_1(model, env, env.eval_prompts(eval_size), max_new_tokens=min(max_new_tokens, room), device=device)

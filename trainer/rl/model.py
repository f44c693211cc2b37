"""The policy: a small character-level GPT (nanoGPT-style) and batched sampling.

`GPT.forward(idx)` returns next-token logits for every position. `sample`
generates a batch of completions in lockstep, one position per step, with a
key/value cache (or, for the benchmark, without one: the whole sequence is run
again every step). Environments that answer tool calls plug in through
`on_tool`: when a row samples `tool_token`, the callback returns tokens that
are fed to that row on the following steps instead of sampled ones, so a
multi-turn episode stays one batched generation and the cache is never rebuilt.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer.rl.vocab import PAD_ID, VOCAB_SIZE


@dataclass
class GPTConfig:
    vocab_size: int = VOCAB_SIZE
    block_size: int = 96  # longest sequence (prompt + completion) the model can see
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128


class KVCache:
    """Keys and values of every layer for a batch, preallocated to `length` positions."""

    def __init__(self, config: GPTConfig, batch: int, length: int, device, dtype):
        shape = (config.n_layer, batch, config.n_head, length, config.n_embd // config.n_head)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.layer = layer
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x, cache: KVCache | None = None, start: int = 0):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            end = start + T
            cache.k[self.layer, :, :, start:end] = k
            cache.v[self.layer, :, :, start:end] = v
            k = cache.k[self.layer, :, :, :end]  # (B, nh, end, hs)
            v = cache.v[self.layer, :, :, :end]
            if T == 1:  # one new query may see every cached key
                y = F.scaled_dot_product_attention(q, k, v)
            elif start == 0:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # several new queries after a cached prefix
                mask = torch.ones(T, end, dtype=torch.bool, device=x.device).tril(diagonal=start)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, cache=None, start=0):
        x = x + self.attn(self.ln_1(x), cache, start)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # GPT-2: scale residual projections by depth
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None, start: int = 0) -> torch.Tensor:
        """Return logits (B, T, vocab) for idx (B, T) placed at positions start..start+T."""
        B, T = idx.shape
        assert start + T <= self.config.block_size, f"sequence of {start + T} exceeds block_size {self.config.block_size}"
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.blocks:
            x = block(x, cache, start)
        return self.lm_head(self.ln_f(x))  # (B, T, vocab)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs (forward + backward) per token: 6 * matmul weights + attention (PaLM appendix B)."""
        c = self.config
        matmul_params = c.n_layer * 12 * c.n_embd**2 + c.n_embd * c.vocab_size  # blocks + lm_head
        attention = 6 * c.n_layer * c.n_embd * seq_len  # QK^T and AV, causal half of 12*L*C*T
        return 6 * matmul_params + attention


# --- sampling ----------------------------------------------------------------------


@dataclass
class Sample:
    tokens: torch.Tensor  # (B, P + n) prompt then completion positions; PAD after a row ends
    sampled: torch.Tensor  # (B, P + n) bool: the policy chose this token (not prompt, not tool result, not after the end)
    finished: torch.Tensor  # (B,) bool: the row sampled a stop token within max_new_tokens
    prompt_len: int


def pick_next(logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None) -> torch.Tensor:
    """Return (B,) next tokens from logits (B, vocab): argmax at temperature 0, else a sample."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)  # (B, vocab)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@torch.no_grad()
def sample(
    model: GPT,
    prompts: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    stop_tokens: tuple[int, ...] = (),
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    tool_token: int | None = None,
    on_tool: Callable[[int, list[int]], list[int]] | None = None,
) -> Sample:
    """Generate up to max_new_tokens positions after prompts (B, P), all rows in lockstep.

    A row ends when it samples one of `stop_tokens`. When a row samples
    `tool_token`, `on_tool(row, completion_ids_so_far)` returns tokens that are
    fed to that row next, marked as not sampled. Every step draws one token per
    row from `generator` whether or not it is used, so the random stream does
    not depend on which rows ended or called a tool.
    """
    B, P = prompts.shape
    device = prompts.device
    total = P + max_new_tokens
    tokens = torch.full((B, total), PAD_ID, dtype=torch.long, device=device)
    tokens[:, :P] = prompts
    sampled = torch.zeros(B, total, dtype=torch.bool, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    stops = torch.tensor(stop_tokens, dtype=torch.long, device=device)
    pending: dict[int, deque[int]] = {}  # row -> tool-result tokens still to feed
    cache = None
    if use_cache:
        dtype = next(model.parameters()).dtype
        cache = KVCache(model.config, B, total, device, dtype)
        logits = model(prompts, cache, 0)[:, -1]  # (B, vocab)
    else:
        logits = model(prompts)[:, -1]
    end = P
    for t in range(P, total):
        if t > P:
            if use_cache:
                logits = model(tokens[:, t - 1 : t], cache, t - 1)[:, -1]  # (B, vocab)
            else:
                logits = model(tokens[:, :t])[:, -1]
        nxt = pick_next(logits, temperature, top_k, generator)  # (B,)
        chosen = ~done  # (B,) rows whose token at t is the policy's
        if pending:
            for row in list(pending):
                nxt[row] = pending[row].popleft()
                chosen[row] = False
                if not pending[row]:
                    del pending[row]
        nxt = nxt.masked_fill(done, PAD_ID)
        tokens[:, t] = nxt
        sampled[:, t] = chosen
        end = t + 1
        if len(stop_tokens):
            done = done | (chosen & torch.isin(nxt, stops))
        if on_tool is not None:
            calls = (chosen & (nxt == tool_token)).nonzero().flatten().tolist()
            for row in calls:
                forced = on_tool(row, tokens[row, P : t + 1].tolist())
                if forced:
                    pending[row] = deque(forced)
        if not pending and bool(done.all()):
            break
    return Sample(tokens=tokens[:, :end], sampled=sampled[:, :end], finished=done, prompt_len=P)

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
    """Keys and values of every layer for a batch, preallocated to `length` positions.

    Left unfilled: attention reads positions 0..end only, each written before it is read (zeroing a
    1,024-row cache cost a tenth of a step's sampling)."""

    def __init__(self, config: GPTConfig, batch: int, length: int, device, dtype):
        shape = (config.n_layer, batch, config.n_head, length, config.n_embd // config.n_head)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.layer = layer
        self.n_head = config.n_head
        self.scale = (config.n_embd // config.n_head) ** -0.5  # scaled_dot_product_attention's default
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x, cache: KVCache | None = None, start: int = 0):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if cache is not None:
            end = start + T
            cache.k[self.layer, :, :, start:end] = k
            cache.v[self.layer, :, :, start:end] = v
            k = cache.k[self.layer, :, :, :end]  # (B, nh, end, hs): read in place
            v = cache.v[self.layer, :, :, :end]
        # Written out as two batched products and a softmax rather than F.scaled_dot_product_attention: at these
        # sizes (head size 32, up to 96 positions) the CPU's fused kernel was slower on every path, most on
        # the two that dominate a step: one new query against the cache (40% of sampling) and the backward
        # pass of training (1.6x this one's).
        att = torch.matmul(q * self.scale, k.transpose(-2, -1))  # (B, nh, T, end)
        if T > 1:  # query i (position start + i) sees keys 0..start + i; one new query sees every cached key
            att = att.add_(torch.full((T, k.size(2)), float("-inf"), device=x.device).triu_(start + 1))
        y = att.softmax(dim=-1) @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x):
        # The exact (erf) GELU: on a CPU the tanh approximation costs 3x as much, and the two differ by < 1e-3.
        return self.c_proj(F.gelu(self.c_fc(x)))


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
    # (B, P + n) float: log p(token) under the temperature-scaled distribution it was drawn from (top-k aside),
    # where `sampled`; 0 elsewhere. None at temperature 0 or when not asked for.
    logprobs: torch.Tensor | None = None


def pick_next(logits: torch.Tensor, temperature: float, top_k: int, uniform: torch.Tensor | None) -> torch.Tensor:
    """Return (A,) next tokens from logits (A, vocab): argmax at temperature 0, else a sample.

    `uniform` (A,) holds one U[0, 1) draw a row: the token where it falls in the row's cumulative
    distribution (the inverse CDF). One draw a row rather than one a token (torch.multinomial's
    exponential race drew 102 a row, a tenth of a step's sampling time), and the caller decides
    which draw each row gets.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (A, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    cdf = F.softmax(logits, dim=-1).cumsum(dim=-1)  # (A, vocab)
    # Scaled by the row's total (1 up to rounding), so the point falls before its end; right=True skips
    # the tokens of probability 0, where the CDF does not rise.
    point = (uniform * cdf[:, -1]).unsqueeze(1)  # (A, 1)
    return torch.searchsorted(cdf, point, right=True).squeeze(1).clamp_(max=logits.size(-1) - 1)


# Sampling drops the rows that have ended from the batch (and the cache) once this share of those still
# running has ended: a finished row costs nothing more, and the copy is paid at most a few times a batch.
COMPACT_SHARE = 0.25


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
    logprobs: bool = False,
) -> Sample:
    """Generate up to max_new_tokens positions after prompts (B, P), all rows in lockstep.

    A row ends when it samples one of `stop_tokens`. When a row samples
    `tool_token`, `on_tool(row, completion_ids_so_far)` returns tokens that are
    fed to that row next, marked as not sampled. Every step draws one number for each of the
    B rows from `generator` whether or not they are still running, so each row's
    tokens do not depend on which other rows ended, called a tool or were
    dropped from the batch (see COMPACT_SHARE).

    With `logprobs` (and a temperature above 0), also return each sampled token's log-probability under
    softmax(logits / temperature), the full distribution (top-k only narrows the draw): what a forward pass
    over the finished sequences would score, so a GRPO update can take it as the policy's old log-probs
    instead of running that pass.
    """
    B, P = prompts.shape
    device = prompts.device
    total = P + max_new_tokens
    tokens = torch.full((B, total), PAD_ID, dtype=torch.long, device=device)
    tokens[:, :P] = prompts
    sampled = torch.zeros(B, total, dtype=torch.bool, device=device)
    keep_logp = logprobs and temperature > 0
    token_logp = torch.zeros(B, total, device=device) if keep_logp else None
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    stops = torch.tensor(stop_tokens, dtype=torch.long, device=device)
    pending: dict[int, deque[int]] = {}  # row -> tool-result tokens still to feed
    rows = torch.arange(B, device=device)  # the rows still in the batch; the cache holds exactly these
    done = finished  # (A,) of those rows, ended
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
            if cache is not None:
                logits = model(tokens[rows, t - 1 : t], cache, t - 1)[:, -1]  # (A, vocab)
            else:
                logits = model(tokens[rows, :t])[:, -1]
        uniform = None
        if temperature > 0:  # B rows' draws, every step, whichever rows remain
            uniform = torch.rand(B, device=device, generator=generator)
            uniform = uniform if len(rows) == B else uniform[rows]
        nxt = pick_next(logits, temperature, top_k, uniform)  # (A,)
        chosen = ~done  # (A,) rows whose token at t is the policy's
        if pending:
            where = {int(r): i for i, r in enumerate(rows.tolist())} if len(rows) < B else None
            for row in list(pending):
                i = row if where is None else where[row]
                nxt[i] = pending[row].popleft()
                chosen[i] = False
                if not pending[row]:
                    del pending[row]
        nxt = nxt.masked_fill(done, PAD_ID)
        tokens[rows, t] = nxt
        sampled[rows, t] = chosen
        if keep_logp:
            scaled = F.log_softmax(logits.float() / temperature, dim=-1)  # (A, vocab)
            token_logp[rows, t] = scaled.gather(1, nxt.unsqueeze(1)).squeeze(1).masked_fill(~chosen, 0.0)
        end = t + 1
        if len(stop_tokens):
            done = done | (chosen & torch.isin(nxt, stops))
        if on_tool is not None:
            calls = (chosen & (nxt == tool_token)).nonzero().flatten().tolist()
            for i in calls:
                row = int(rows[i])
                forced = on_tool(row, tokens[row, P : t + 1].tolist())
                if forced:
                    pending[row] = deque(forced)
        ended = int(done.sum())
        if ended == len(rows) and not pending:
            finished[rows] = True
            break
        if ended and ended >= COMPACT_SHARE * len(rows) and t + 1 < total:
            finished[rows[done]] = True
            keep = (~done).nonzero().flatten()
            rows, done = rows[keep], done[keep]
            if cache is not None:
                cache.k, cache.v = cache.k[:, keep], cache.v[:, keep]
    else:
        finished[rows[done]] = True
    return Sample(tokens=tokens[:, :end], sampled=sampled[:, :end], finished=finished, prompt_len=P,
                  logprobs=None if token_logp is None else token_logp[:, :end])

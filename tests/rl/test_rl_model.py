"""The policy and batched sampling: cache equals no cache, stops, tool turns."""

import torch
from torch import nn
from torch.testing import assert_close

from trainer.rl import get_env
from trainer.rl.model import GPT, GPTConfig, KVCache, sample
from trainer.rl.rollout import rewards, rollout
from trainer.rl.vocab import EOS_ID, PAD_ID, decode, encode, encode_prompts

SMALL = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=48)


def random_model(seed=0):
    torch.manual_seed(seed)
    model = GPT(SMALL)
    with torch.no_grad():  # larger weights than the init, so logits are far from ties
        for p in model.parameters():
            p.mul_(5)
    return model


def test_cached_forward_gives_the_same_logits_as_a_full_forward():
    model = random_model()
    idx = torch.randint(0, SMALL.vocab_size, (3, 20))
    full = model(idx)  # (3, 20, vocab)
    cache = KVCache(SMALL, 3, 20, "cpu", torch.float32)
    pieces = [model(idx[:, :8], cache, 0), model(idx[:, 8:12], cache, 8)]  # prefill, then a chunk
    pieces += [model(idx[:, t : t + 1], cache, t) for t in range(12, 20)]  # one token at a time
    assert_close(torch.cat(pieces, dim=1), full, atol=1e-4, rtol=1e-4)


def test_greedy_sampling_with_the_kv_cache_equals_sampling_without_it():
    model = random_model()
    prompts = encode_prompts(["12+34=", "999-1=", "7+7="], 8)
    cached = sample(model, prompts, 30, temperature=0.0, use_cache=True)
    uncached = sample(model, prompts, 30, temperature=0.0, use_cache=False)
    assert torch.equal(cached.tokens, uncached.tokens)
    assert cached.tokens.shape == (3, 38)


def test_sampling_is_reproducible_from_its_generator_with_or_without_cache():
    model = random_model()
    prompts = encode_prompts(["12+34="] * 4, 8)
    runs = [
        sample(model, prompts, 16, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(7), use_cache=c)
        for c in (True, True, False)
    ]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert torch.equal(runs[0].tokens, runs[2].tokens)
    assert len({tuple(r) for r in runs[0].tokens.tolist()}) > 1  # rows differ: it did sample


class Scripted(nn.Module):
    """A stand-in policy that writes `script` after the prompt, whatever the environment inserts."""

    def __init__(self, script: str, prompt_len: int):
        super().__init__()
        self.config = GPTConfig(block_size=64)
        self.script = encode(script)
        self.prompt_len = prompt_len
        self.history = torch.full((1, 64), PAD_ID)
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, idx, cache=None, start=0):
        B, T = idx.shape
        if self.history.shape[0] != B:
            self.history = torch.full((B, 64), PAD_ID)
        self.history[:, start : start + T] = idx
        logits = torch.zeros(B, T, self.config.vocab_size)
        position = start + T - self.prompt_len  # completion tokens so far, tool results included
        nxt = self.script[position] if position < len(self.script) else EOS_ID
        logits[:, -1, nxt] = 10.0
        return logits


def test_toolcalc_runs_the_calculator_mid_generation_and_counts_the_call():
    env = get_env("toolcalc")
    script = "<calc>37*48+5</calc><out>1781</out>1781\n"
    ro = rollout(Scripted(script, env.prompt_width), env, ["37*48+5="] * 2, max_new_tokens=30, temperature=0.0)
    assert ro.completions == ["<calc>37*48+5</calc><out>1781</out>1781"] * 2
    assert ro.tool_calls == [1, 1]
    assert rewards(env, ro) == [1.0, 1.0]
    # the policy is trained on what it wrote, never on the calculator's answer
    P = ro.prompt_len
    written = [decode([t]) for t, s in zip(ro.tokens[0, P:].tolist(), ro.sampled[0, P:].tolist()) if s]
    assert "".join(written) == "<calc>37*48+5</calc>1781\n"


def test_a_malformed_call_is_answered_with_err_and_the_episode_goes_on():
    env = get_env("toolcalc")
    script = "<calc>37*</calc><err>1776\n"
    ro = rollout(Scripted(script, env.prompt_width), env, ["37*48="], max_new_tokens=30, temperature=0.0)
    assert ro.completions == ["<calc>37*</calc><err>1776"]
    assert ro.tool_calls == [1]
    assert ro.finished == [True]
    assert rewards(env, ro) == [1.0]


def test_a_row_that_never_stops_is_truncated_and_earns_nothing():
    env = get_env("arithmetic")
    ro = rollout(Scripted("1111111111111", env.prompt_width), env, ["1+1="], max_new_tokens=5, temperature=0.0)
    assert ro.finished == [False]
    assert ro.completions == ["11111"]
    assert rewards(env, ro) == [0.0]


def test_rows_stop_independently_and_pad_after_their_stop_token():
    model = random_model()
    prompts = encode_prompts(["1+1=", "2+2="], 8)
    s = sample(model, prompts, 10, temperature=0.0, stop_tokens=tuple(range(SMALL.vocab_size)))  # every token stops
    assert s.finished.tolist() == [True, True]
    assert s.tokens.shape == (2, 9)  # one token each, then nothing left to do
    assert s.sampled[:, -1].tolist() == [True, True]

"""The policy and batched sampling: cache equals no cache, stops, tool turns."""

import torch
from torch import nn
from torch.testing import assert_close

from trainer.rl import get_env
from trainer.rl.grpo import token_logprobs
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


def test_attention_is_causal_scaled_dot_product_attention():
    """The attention is written out (two products and a softmax, faster on CPUs at these sizes): it must be
    PyTorch's causal scaled dot-product attention, position for position."""
    import torch.nn.functional as F

    model = random_model()
    attn = model.blocks[0].attn
    x = torch.randn(3, 20, SMALL.n_embd)
    q, k, v = (t.view(3, 20, SMALL.n_head, -1).transpose(1, 2) for t in attn.c_attn(x).split(SMALL.n_embd, dim=2))
    expected = attn.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(3, 20, -1))
    assert_close(attn(x), expected, atol=1e-5, rtol=1e-5)


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


def test_the_samplers_log_probs_equal_a_fresh_forwards_under_temperature_and_top_k_tool_results_excluded():
    """What the GRPO update takes as the policy's old log-probs instead of running a forward pass: log p of each
    sampled token under softmax(logits / temperature), scored over the finished sequences in one pass."""
    torch.manual_seed(0)
    model = GPT(SMALL)  # weights at the scale training keeps them (random_model's are five times that)
    prompts = encode_prompts(["12+34=", "999-1=", "7+7=", "5*5="] * 8, 8)  # 32 rows
    tool = encode("=")[0]  # a token the random policy samples often: answered with three forced tokens
    for temperature, top_k in ((1.0, 0), (0.7, 5), (1.5, 20)):
        s = sample(model, prompts, 30, temperature=temperature, top_k=top_k, generator=torch.Generator().manual_seed(3),
                   tool_token=tool, on_tool=lambda row, ids: encode("<9>"), logprobs=True)
        with torch.no_grad():
            fresh = token_logprobs(model(s.tokens[:, :-1]) / temperature, s.tokens[:, 1:])  # (B, L-1)
        mask = s.sampled[:, 1:]
        kept = s.logprobs[:, 1:]
        assert mask.sum() > 100
        assert (kept[mask] - fresh[mask]).abs().max() < 1e-5, (temperature, top_k)
        forced = ~s.sampled[:, s.prompt_len:] & (s.tokens[:, s.prompt_len:] != PAD_ID)
        assert forced.sum() >= 3, "some rows called the tool and were fed its result"
        assert (s.logprobs[:, s.prompt_len:][forced] == 0).all(), "tool results are not the policy's: not scored"
        assert (s.logprobs[:, : s.prompt_len] == 0).all() and (s.logprobs[~s.sampled] == 0).all()
    assert sample(model, prompts, 5, temperature=0.0, logprobs=True).logprobs is None, "greedy: nothing drawn"


def test_dropping_ended_rows_from_the_batch_changes_no_rows_tokens(monkeypatch):
    """Rows leave the batch (and the cache) as they end; every row draws the same noise whatever happened to the
    others, so the tokens and log-probs are those of a batch that kept every row to the end."""
    import trainer.rl.model as model_module

    model = random_model()
    prompts = encode_prompts(["12+34=", "999-1=", "7+7=", "5*5="] * 16, 8)  # 64 rows
    tool = encode("=")[0]

    def run():
        return sample(model, prompts, 30, temperature=1.0, top_k=8, stop_tokens=(EOS_ID, encode("7")[0]),
                      generator=torch.Generator().manual_seed(11), tool_token=tool,
                      on_tool=lambda row, ids: encode(str(row)), logprobs=True)

    compacted = run()
    monkeypatch.setattr(model_module, "COMPACT_SHARE", 2.0)  # never drops a row
    whole = run()
    assert 0 < compacted.finished.sum() < 64, "some rows ended early, some never did"
    assert torch.equal(compacted.tokens, whole.tokens) and torch.equal(compacted.sampled, whole.sampled)
    assert torch.equal(compacted.finished, whole.finished)
    assert_close(compacted.logprobs, whole.logprobs, atol=1e-5, rtol=0)


def test_a_draw_follows_the_temperature_scaled_distribution_and_top_k_never_picks_outside_it():
    from trainer.rl.model import pick_next

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]])).expand(200_000, 5)  # token 4: probability 0
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(pick_next(logits, 1.0, 0, u), minlength=5) / 200_000
    assert_close(counts, torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0]), atol=0.005, rtol=0)
    hot = torch.softmax(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])) / 2.0, dim=0)  # temperature 2
    counts = torch.bincount(pick_next(logits[:, :4], 2.0, 0, u), minlength=4) / 200_000
    assert_close(counts, hot, atol=0.005, rtol=0)
    top2 = torch.bincount(pick_next(logits, 1.0, 2, u), minlength=5) / 200_000
    assert_close(top2, torch.tensor([0.625, 0.375, 0.0, 0.0, 0.0]), atol=0.005, rtol=0)
    edges = pick_next(logits[:3], 1.0, 0, torch.tensor([0.0, 0.5, 1.0 - 2**-24]))
    assert edges.tolist() == [0, 1, 3], "the ends of [0, 1) land on tokens that can be drawn"

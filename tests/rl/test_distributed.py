"""Two ranks on CPU (gloo) update the policy as one process does on the combined batch.

The ranks are processes started fresh (spawned: a fork of a process whose torch threads are
running can hang in the child), joined through a TCPStore on 127.0.0.1, as the job runner's
ranks are. Both paths are given the same rollouts: each rank its share (whole
prompt groups), one process all of them. Tolerance: 1e-5 on every weight after the step's
six AdamW updates (measured: about 1e-7, the order of float32 sums); 1e-6 on the gradient.
"""

import dataclasses

import pytest
import torch

from tests.rl.conftest import tiny_config
from tests.rl.ranks import run_ranks
from trainer.rl import Trainer
from trainer.rl.rollout import Rollout

WEIGHT_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-6
# B = 4 prompts x 4 = 16 rows in minibatches of 6, 6 and 4, two epochs: six updates, each minibatch
# drawn over both ranks' rows by the shared permutation.
CONFIG = dict(prompts_per_step=4, group_size=4, minibatch_size=6, inner_epochs=2, torch_threads=1)


def share_of(batch, ranks, group_size):
    """The part of a whole step's batch that rank `ranks.rank` holds: its prompts and their rows."""
    first, last = ranks.share(len(batch.prompts))
    lo, hi = first * group_size, last * group_size
    ro = batch.rollout
    rows = Rollout(prompts=ro.prompts[lo:hi], tokens=ro.tokens[lo:hi], sampled=ro.sampled[lo:hi],
                   completions=ro.completions[lo:hi], finished=ro.finished[lo:hi], tool_calls=ro.tool_calls[lo:hi],
                   prompt_len=ro.prompt_len, logprobs=ro.logprobs[lo:hi])
    return dataclasses.replace(batch, first_prompt=first, prompts=batch.prompts[first:last], rollout=rows,
                               reward=batch.reward[lo:hi])


def one_step_batches(base_dir):
    """Two whole-step batches of the same rollouts, and the prompt generator's state after drawing them.

    "even": as sampled. "uneven": rank 1's rows (the last two prompts) keep only their first sampled
    token, so the ranks hold very different token counts (a per-rank token mean averaged over the ranks
    would weigh rank 1's few tokens as many times too much as rank 0's rows hold tokens on average).
    Rewards vary within groups, so the update has a policy gradient (the tiny policy's own rewards are
    mostly all 0)."""
    trainer = Trainer(tiny_config(**CONFIG), base_dir)
    even = trainer.collect()
    even.reward = torch.rand(len(even.reward), generator=torch.Generator().manual_seed(5)).round()
    half = len(even.reward) // 2
    sampled = even.rollout.sampled.clone()
    sampled[half:] &= sampled[half:].cumsum(dim=1) <= 1
    uneven = dataclasses.replace(even, rollout=dataclasses.replace(even.rollout, sampled=sampled))
    return {"even": even, "uneven": uneven}, trainer.prompt_generator.get_state()


def after_update(trainer, batch):
    result = trainer.update(batch)
    return {
        "weights": {name: p.detach().clone() for name, p in trainer.policy.named_parameters()},
        "grads": {name: p.grad.clone() for name, p in trainer.policy.named_parameters()},
        "metrics": result.metrics,
        "tokens": int(batch.rollout.sampled.sum()),
    }


def update_on_each_rank(ranks, batches, prompt_state, base_dir):
    out = {}
    for variant, batch in batches.items():
        trainer = Trainer(tiny_config(**CONFIG), base_dir, ranks=ranks)
        trainer.prompt_generator.set_state(prompt_state)
        out[variant] = after_update(trainer, share_of(batch, ranks, CONFIG["group_size"]))
    return out


@pytest.fixture(scope="module")
def updates(tiny_base_dir):
    """{variant: (the one-process update, [rank 0's, rank 1's])} from the same rollouts."""
    batches, prompt_state = one_step_batches(tiny_base_dir)
    one = {}
    for variant, batch in batches.items():
        trainer = Trainer(tiny_config(**CONFIG), tiny_base_dir)
        trainer.prompt_generator.set_state(prompt_state)  # where collect() left it: the same minibatch order
        one[variant] = after_update(trainer, batch)

    per_rank = run_ranks(2, update_on_each_rank, batches, prompt_state, tiny_base_dir)
    return {variant: (one[variant], [r[variant] for r in per_rank]) for variant in batches}


def max_difference(a, b):
    return max((a[name] - b[name]).abs().max().item() for name in a)


@pytest.mark.parametrize("variant", ["even", "uneven"])
def test_two_ranks_update_as_one_process_does_on_the_combined_batch(updates, variant):
    one, (rank0, rank1) = updates[variant]
    assert max(g.abs().max().item() for g in one["grads"].values()) > 1e-3  # a real gradient, not zeros
    assert max_difference(rank0["grads"], one["grads"]) <= GRAD_TOLERANCE
    assert max_difference(rank0["weights"], one["weights"]) <= WEIGHT_TOLERANCE
    # The ranks stay in step: the same summed gradient, the same AdamW updates, bit for bit.
    assert all(torch.equal(rank0["weights"][name], rank1["weights"][name]) for name in rank0["weights"])


def test_unequal_token_counts_between_ranks_are_weighed_per_token(updates):
    _, (rank0, rank1) = updates["uneven"]
    # The case a per-rank mean would get wrong: rank 1 holds one token a row, rank 0 what its rows sampled (at
    # least two a row: a tiny policy that wrote EOS first on every row is not one a CPU's rounding makes).
    assert rank0["tokens"] >= 2 * rank1["tokens"] > 0


def test_the_metrics_of_two_ranks_are_the_whole_batch_s(updates):
    one, (rank0, rank1) = updates["even"]
    assert rank0["metrics"].keys() == one["metrics"].keys()
    for key in ("train/reward_mean", "train/reward_std", "train/frac_reward_zero_std", "train/truncated_rate",
                "train/response_length_mean", "performance/gen_tokens", "performance/tokens_total"):
        assert rank0["metrics"][key] == one["metrics"][key], key  # gathered rows, not one rank's
    for key in ("train/loss", "train/kl", "train/entropy", "train/clip_ratio", "train/grad_norm"):
        assert rank0["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key
    assert rank1["metrics"]["train/reward_mean"] == rank0["metrics"]["train/reward_mean"]

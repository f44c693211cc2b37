"""GRPO's pure functions against tensors computed by hand."""

import math

import torch
from torch.testing import assert_close

from trainer.rl.grpo import clipped_surrogate, entropy, group_advantages, grpo_loss, kl_k3, masked_mean, token_logprobs


def test_advantages_are_rewards_standardised_within_each_group():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.1, 0.1, 0.1]])
    adv = group_advantages(rewards, eps=0.0)
    # group 1: mean 0.5, sample std sqrt(4 * 0.25 / 3)
    s1 = math.sqrt(1 / 3)
    # group 2: mean 0.325, deviations 0.675 and -0.225 x3, sample std sqrt((0.675^2 + 3 * 0.225^2) / 3)
    s2 = math.sqrt((0.675**2 + 3 * 0.225**2) / 3)
    expected = torch.tensor([[0.5 / s1, -0.5 / s1, -0.5 / s1, 0.5 / s1], [0.675 / s2, -0.225 / s2, -0.225 / s2, -0.225 / s2]])
    assert_close(adv, expected)


def test_a_group_with_equal_rewards_gets_zero_advantages():
    adv = group_advantages(torch.tensor([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0]]))
    assert_close(adv, torch.zeros(2, 3))


def test_clipped_surrogate_takes_the_pessimistic_term():
    old = torch.zeros(2, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]]))  # ratios, since old log-probs are 0
    advantages = torch.tensor([1.0, -2.0])
    loss, active = clipped_surrogate(logp, old, advantages, clip_eps=0.2)
    # A = +1: min(r, clip(r)) -> min(1.5, 1.2), min(0.5, 0.8), min(1.1, 1.1)
    # A = -2: min(-2r, -2clip(r)) -> min(-3, -2.4), min(-1, -1.6), min(-2.2, -2.2)
    expected = -torch.tensor([[1.2, 0.5, 1.1], [-3.0, -1.6, -2.2]])
    assert_close(loss, expected)
    assert active.tolist() == [[True, False, False], [False, True, False]]


def test_kl_k3_matches_its_formula_and_vanishes_for_equal_policies():
    logp = torch.log(torch.tensor([0.5, 0.2, 0.9]))
    ref = torch.log(torch.tensor([0.25, 0.4, 0.9]))
    ratio = torch.tensor([0.5, 2.0, 1.0])  # p_ref / p
    assert_close(kl_k3(logp, ref), ratio - torch.log(ratio) - 1)
    assert_close(kl_k3(logp, logp), torch.zeros(3))
    assert (kl_k3(logp, ref) >= 0).all()


def test_masked_mean_counts_only_masked_positions():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert_close(masked_mean(x, mask), torch.tensor(2.0))
    assert_close(masked_mean(x, torch.zeros_like(mask)), torch.tensor(0.0))


def test_grpo_loss_is_surrogate_plus_weighted_kl_over_sampled_tokens():
    logp = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.9]]))
    old = logp.clone()  # ratio 1: the surrogate is -A per token
    ref = torch.log(torch.tensor([[0.25, 0.4], [0.6, 0.9]]))
    advantages = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[True, True], [True, False]])
    loss, stats = grpo_loss(logp, old, ref, advantages, mask, clip_eps=0.2, kl_coef=0.5)
    kl = torch.tensor([0.5 - math.log(0.5) - 1, 0.0, 2.0 - math.log(2.0) - 1])  # the three sampled tokens
    surrogate = torch.tensor([-1.0, -1.0, 1.0])
    assert_close(loss, (surrogate + 0.5 * kl).mean())
    assert_close(stats["kl"], kl.mean())
    assert_close(stats["clip_ratio"], torch.tensor(0.0))


def test_token_logprobs_and_entropy_of_a_uniform_distribution():
    logits = torch.zeros(1, 2, 4)
    targets = torch.tensor([[0, 3]])
    assert_close(token_logprobs(logits, targets), torch.full((1, 2), -math.log(4)))
    assert_close(entropy(logits), torch.full((1, 2), math.log(4)))


def test_the_loss_gradient_raises_the_log_prob_of_a_rewarded_token():
    logits = torch.zeros(1, 1, 3, requires_grad=True)
    logp = token_logprobs(logits, torch.tensor([[1]]))
    loss, _ = grpo_loss(logp, logp.detach(), logp.detach(), torch.tensor([1.0]), torch.ones(1, 1, dtype=torch.bool),
                        clip_eps=0.2, kl_coef=0.0)
    loss.backward()
    assert logits.grad[0, 0, 1] < 0 < logits.grad[0, 0, 0]  # gradient descent pushes token 1 up, others down

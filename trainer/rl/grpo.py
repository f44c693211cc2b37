"""GRPO's arithmetic as pure functions of tensors, so each can be checked by hand.

Shapes: P prompts, G completions per prompt, B = P * G rows, T token positions.
Per-token tensors are (B, T); `mask` (B, T) marks the tokens the policy sampled
(not the prompt, not tool results, not padding) and every mean is over those.
When a minibatch is spread over several processes, `tokens` is the minibatch's
sampled-token count over all of them: each process's mean is then its share of
the whole minibatch's mean, and the shares add up to it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def group_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Return (r - group mean) / (group std + eps) for rewards (P, G), as (P, G).

    The std is the sample standard deviation (Bessel-corrected, as in TRL).
    A group whose rewards are all equal gets advantages of zero.
    """
    mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    std = rewards.std(dim=1, keepdim=True)  # (P, 1)
    return (rewards - mean) / (std + eps)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Return log p(target) (B, T) from logits (B, T, V) and targets (B, T)."""
    return torch.gather(F.log_softmax(logits.float(), dim=-1), 2, targets.unsqueeze(-1)).squeeze(-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Return the entropy in nats (B, T) of the distributions given by logits (B, T, V)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Return the k3 estimate of KL(policy || reference) per token: exp(d) - d - 1, d = ref - logp.

    Unbiased for samples from the policy and never negative (Schulman, "Approximating KL").
    """
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the PPO clipped loss per token (B, T) and where the clip was active (B, T) bool.

    loss = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A), ratio = exp(logp - old_logp);
    advantages (B,) are per sequence and broadcast over its tokens.
    """
    adv = advantages.unsqueeze(1)  # (B, 1)
    ratio = torch.exp(logp - old_logp)  # (B, T)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    loss = -torch.minimum(unclipped, clipped)
    active = clipped < unclipped  # the min picked the clipped term: no gradient flows
    return loss, active


def masked_mean(x: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Return the mean of x over the positions where mask is true (0 when there are none).

    With `tokens` (a count of masked positions, this mask's and others'), return the sum over this
    mask divided by that count: this mask's share of the mean over all of them.
    """
    mask = mask.to(x.dtype)
    count = mask.sum() if tokens is None else tokens.to(x.dtype)
    return (x * mask).sum() / count.clamp(min=1)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float,
    kl_coef: float,
    tokens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return the scalar loss and its parts (detached) for one minibatch.

    loss = mean over sampled tokens of [clipped surrogate + kl_coef * k3 KL to the reference].
    Every sampled token in the minibatch weighs the same, so long completions
    are not diluted (the token-level mean of DAPO rather than GRPO's per-sequence mean).
    With `tokens` (the minibatch's sampled tokens on every process), the loss and its parts are
    this process's shares (see `masked_mean`). Without a reference (`ref_logp` None, a run with kl_coef 0
    that skips the reference's forward pass) there is no KL term and no "kl" part.
    """
    surrogate, active = clipped_surrogate(logp, old_logp, advantages, clip_eps)  # (B, T)
    stats = {
        "policy_loss": masked_mean(surrogate, mask, tokens).detach(),
        "clip_ratio": masked_mean(active.float(), mask, tokens).detach(),
    }
    if ref_logp is None:
        return masked_mean(surrogate, mask, tokens), stats
    kl = kl_k3(logp, ref_logp)  # (B, T)
    stats["kl"] = masked_mean(kl, mask, tokens).detach()
    return masked_mean(surrogate + kl_coef * kl, mask, tokens), stats

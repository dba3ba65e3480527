"""FlashREINFORCE: batch-centred returns, a Bernoulli-KL trajectory gate, equal trajectory weight.

No critic and no group statistics. For a batch of B episodes (S games x N episodes here) with
returns R_1..R_B:

    R_bar = (1/B) sum_j R_j,        A_i = R_i - R_bar

(no division by a standard deviation), on every action of episode i.

Trajectory gate, per episode i over its T_i model-generated tokens, with p_t the sampler's
probability of the sampled token and q_t the current policy's at the same history:

    d_t   = p_t log(p_t / q_t) + (1 - p_t) log((1 - p_t) / (1 - q_t))      (Bernoulli KL)
    D_bar = (1/T_i) sum_t d_t,       m_i = 1[D_bar <= delta]

Equal trajectory weight: L = (1/B) sum_i m_i ((1/T_i) sum_t l_{i,t}), the trainer's per-sample mean
of token losses (``losses.clipped_policy_loss``) with gated episodes' tokens left out.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # tensors in, tensors out; the registry imports this module without torch
    import torch

PROBABILITY_FLOOR = 1e-6  # keeps log(1 - p) finite for a token sampled with probability ~1


def batch_centred_advantages(returns: Sequence[float], group_size: int) -> list[float]:
    """A_i = R_i - mean_j R_j over the whole batch; ``group_size`` (the episodes per game) only
    checks that the batch holds whole groups: the baseline ignores them."""
    if group_size < 1 or len(returns) % group_size:
        raise ValueError(f"{len(returns)} returns do not split into groups of {group_size}")
    if not returns:
        return []
    mean = statistics.fmean(returns)
    return [r - mean for r in returns]


def bernoulli_kl(p: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
    """d = p log(p/q) + (1-p) log((1-p)/(1-q)), elementwise, probabilities kept in [floor, 1 - floor]."""
    p = p.clamp(PROBABILITY_FLOOR, 1.0 - PROBABILITY_FLOOR)
    q = q.clamp(PROBABILITY_FLOOR, 1.0 - PROBABILITY_FLOOR)
    return p * (p / q).log() + (1.0 - p) * ((1.0 - p) / (1.0 - q)).log()


def trajectory_kl(logprobs: torch.Tensor, old_logprobs: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] log-probs of the current policy and the sampler -> [B] D_bar, the mean Bernoulli KL
    over each row's loss tokens (0 for a row without any). No gradient."""
    logprobs, old_logprobs = logprobs.detach(), old_logprobs.detach()
    mask = loss_mask.to(logprobs.dtype)
    d = bernoulli_kl(old_logprobs.exp(), logprobs.exp()) * mask
    return d.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def trajectory_gate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, loss_mask: torch.Tensor,
                    delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, D_bar): m[i] is True where episode i is kept, D_bar[i] <= delta."""
    kl = trajectory_kl(logprobs, old_logprobs, loss_mask)
    return kl <= delta, kl

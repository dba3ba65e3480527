"""TPPO: tracking-value PPO (docs/algorithms.md section 2). Pure torch on one sample's response tokens.

A scalar critic f_phi outputs one *logit increment* per response position (slime's value head, the
value at the position before each response token). For response tokens t = 1..T:

    z_t = sum_{i<=t} m_i f_i            accumulated logit (m = loss mask; m_i = 0 tokens add nothing)
    V_t = sigmoid(z_t)                   value of the prefix s_t, in (0, 1)

Critic loss, binary cross-entropy of the accumulated logits against the terminal reward R in [0, 1],
per-sample token mean over the mask:

    l_t = -[ R log sigmoid(z_t) + (1 - R) log(1 - sigmoid(z_t)) ]
    L_V = sum_t m_t l_t / max(1, sum_t m_t)

Through the cumulative sum, dL_V/df_i collects the residuals sigmoid(z_t) - R of every t >= i.

Advantages, slime's GAE convention (V after the last token is 0, the reward r_t is given per token,
typically R at t = T and 0 elsewhere):

    delta_t = r_t + gamma V_{t+1} - V_t
    A_t     = delta_t + gamma lambda A_{t+1}
    ret_t   = A_t + V_t
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _mask_like(increments: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if increments.dim() != 1:
        raise ValueError(f"TPPO works on one sample's 1-D response tensor, got shape {tuple(increments.shape)}")
    if mask is None:
        return torch.ones_like(increments)
    if mask.shape != increments.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from increments shape {tuple(increments.shape)}")
    return mask.to(increments.dtype)


def accumulated_logits(increments: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """z_t = sum_{i<=t} m_i f_i."""
    return torch.cumsum(increments * _mask_like(increments, mask), dim=0)


def reconstruct_values(increments: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """V_t = sigmoid(z_t)."""
    return torch.sigmoid(accumulated_logits(increments, mask))


def value_bce_loss(
    increments: torch.Tensor, terminal_reward: float | torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """L_V = sum_t m_t BCEWithLogits(z_t, R) / max(1, sum_t m_t)."""
    m = _mask_like(increments, mask)
    reward = torch.as_tensor(terminal_reward, dtype=increments.dtype, device=increments.device)
    if not bool((reward >= 0).all() and (reward <= 1).all()):
        raise ValueError(f"TPPO's critic needs a terminal reward in [0, 1], got {terminal_reward}")
    z = torch.cumsum(increments * m, dim=0)
    losses = F.binary_cross_entropy_with_logits(z, reward.expand_as(z), reduction="none")
    return (losses * m).sum() / m.sum().clamp_min(1.0)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float, lambd: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, ret): delta_t = r_t + gamma V_{t+1} - V_t (V_{T+1} = 0); A_t = delta_t + gamma lambda A_{t+1}; ret = A + V."""
    if rewards.shape != values.shape or rewards.dim() != 1:
        raise ValueError(f"gae needs equal 1-D rewards and values, got {tuple(rewards.shape)} and {tuple(values.shape)}")
    rewards = rewards.to(values.dtype)
    advantages = torch.zeros_like(values)
    next_value = torch.zeros((), dtype=values.dtype, device=values.device)
    next_advantage = torch.zeros((), dtype=values.dtype, device=values.device)
    for t in range(values.numel() - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        next_advantage = delta + gamma * lambd * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values

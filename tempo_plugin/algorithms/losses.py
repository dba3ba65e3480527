"""Policy-gradient losses: the clipped surrogate (``--policy-loss ppo``, the same as slime's
``compute_policy_loss``) and the method's importance-sampling loss (``--policy-loss importance_sampling``).

Per loss token t with current log-prob log pi_theta, old (sampler) log-prob log pi_old and
advantage A_t:

    rho_t = exp(log pi_theta(y_t) - log pi_old(y_t))
    l_t   = max(-rho_t A_t, -clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)

The per-sample loss is the mean of l_t over its loss tokens, and the batch loss the mean over
samples (slime's default aggregation when ``--calculate-per-token-loss`` is off).

The importance-sampling loss has no clip and sums over every loss token of every sample:

    L = sum_i sum_t -rho_{i,t} A_{i,t}

The value cross-entropy (``--critic-value expected``, ``critic/readout.py``) is no policy gradient:
its samples are teacher-forced answers, each token t weighted w_t = beta q_j, and per sample

    l_i = -sum_t w_t log pi_theta(y_t)

(a sum over the answer's tokens: log pi of the whole answer), averaged over samples like the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PolicyLossOutput:
    loss: torch.Tensor
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor
    active: torch.Tensor | None = None  # [B, T] 1 where a token's policy gradient flows (not clipped, not masked)


def _ratio_terms(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The float mask, log rho_t and rho_t on the loss tokens, and the approximate KL
    mean over them of (rho_t - 1) - log rho_t (no gradient)."""
    mask = loss_mask.to(logprobs.dtype)
    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        approx_kl = (((ratio - 1.0) - log_ratio) * mask).sum() / mask.sum().clamp(min=1.0)
    return mask, log_ratio, ratio, approx_kl


def _mean_per_sample(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over each sample's loss tokens, then over the samples that have any."""
    has_tokens = (mask.sum(dim=1) > 0).to(per_token.dtype)
    per_sample = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return (per_sample * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    eps_low: float | torch.Tensor = 0.2,
    eps_high: float | torch.Tensor = 0.2,
) -> PolicyLossOutput:
    """All inputs are [B, T]; ``loss_mask`` is 1 on trained tokens; ``eps_low`` and ``eps_high`` are
    numbers or [B, T] tensors (per token: BPCO's divergence clipping). Returns scalar tensors."""
    mask, log_ratio, ratio, approx_kl = _ratio_terms(logprobs, old_logprobs, loss_mask)
    low = 1.0 - torch.as_tensor(eps_low, dtype=ratio.dtype, device=ratio.device)
    high = 1.0 + torch.as_tensor(eps_high, dtype=ratio.dtype, device=ratio.device)
    unclipped = -ratio * advantages
    clipped = -torch.clamp(ratio, low, high) * advantages
    per_token = torch.maximum(unclipped, clipped)
    loss = _mean_per_sample(per_token, mask)
    with torch.no_grad():
        total = mask.sum().clamp(min=1.0)
        clip_fraction = (((unclipped < clipped).to(mask.dtype)) * mask).sum() / total
        inside = (ratio >= low) & (ratio <= high)
        active = ((unclipped > clipped) | inside).to(mask.dtype)
    return PolicyLossOutput(loss=loss, clip_fraction=clip_fraction, approx_kl=approx_kl, active=active)


def ratio_masked_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> PolicyLossOutput:
    """SAO's token masking: l_t = -w_t A_t with w_t = rho_t 1[1 - eps_low < rho_t < 1 + eps_high]
    (outside the band a token contributes nothing, whatever the sign of A); aggregated like the
    clipped loss. ``clip_fraction`` is the share of loss tokens masked out."""
    mask, _, ratio, approx_kl = _ratio_terms(logprobs, old_logprobs, loss_mask)
    inside = ((ratio > 1.0 - eps_low) & (ratio < 1.0 + eps_high)).to(mask.dtype)
    loss = _mean_per_sample(-ratio * inside * advantages, mask)
    with torch.no_grad():
        masked_out = ((1.0 - inside) * mask).sum() / mask.sum().clamp(min=1.0)
    return PolicyLossOutput(loss=loss, clip_fraction=masked_out, approx_kl=approx_kl, active=inside)


def importance_sampling_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
) -> PolicyLossOutput:
    """All inputs are [B, T]; the loss is summed over the loss tokens of all B samples (not averaged)."""
    mask, _, ratio, approx_kl = _ratio_terms(logprobs, old_logprobs, loss_mask)
    loss = (-ratio * advantages * mask).sum()
    return PolicyLossOutput(loss=loss, clip_fraction=torch.zeros((), dtype=logprobs.dtype), approx_kl=approx_kl,
                            active=torch.ones_like(mask))


def centred_score_loss(centre: torch.Tensor, advantages: torch.Tensor, loss_mask: torch.Tensor, active: torch.Tensor,
                       summed: bool = False) -> torch.Tensor:
    """Score centering (StableReinforce): with c_t = (1/K) sum_k log pi_theta(u_k | s_t), u_k drawn
    from the policy at s_t, the term a_t A_t c_t (a_t: the token's gradient flows in the policy
    loss) aggregated as that loss (a mean per sample, then over samples; ``summed``: a sum, as the
    importance-sampling loss). Added to the policy loss, the gradient at rho = 1 becomes
    -A_t (grad log pi(y_t) - (1/K) sum_k grad log pi(u_k)): on the logits, A (e_y - mean_k e_{u_k})."""
    mask = loss_mask.to(centre.dtype)
    per_token = active.detach() * advantages * centre
    return (per_token * mask).sum() if summed else _mean_per_sample(per_token, mask)


def value_cross_entropy(logprobs: torch.Tensor, weights: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] inputs; returns the [B] per-sample losses l_i = -sum_t w_t log pi_theta(y_t) over the loss tokens."""
    return -(weights * logprobs * loss_mask.to(logprobs.dtype)).sum(dim=1)

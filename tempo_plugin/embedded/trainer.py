"""One optimiser step on a list of TrainSamples with the clipped policy-gradient loss.

Samples are packed into right-padded micro-batches (at most ``tokens_per_micro_batch`` padded
tokens each); each micro-batch's loss is weighted by its share of the samples, so the accumulated
gradient equals that of the mean over all samples. Then the gradient norm is clipped and AdamW
steps once.

Samples that share a prompt (the N branches of one start state, the K critic samples of one
state) go into the same micro-batch, and ``token_logprobs`` runs a prefix that every row of a batch
shares once, as a key/value cache that each row's remainder attends to. The prefix carries no loss,
so log-probs and gradients are those of running every row in full; only the work shrinks (a TD
update of the default tiny run: about 3x fewer tokens through the model).

Cross-entropy rows (the expected critic's ``VALUE`` answers, CoPE's ``FORECAST`` episodes) take
-sum_t w_t log pi_theta(y_t) in the same forward pass. With ``trajectory_kl_gate`` (FlashREINFORCE)
a policy-gradient row whose mean Bernoulli KL to the sampler exceeds it leaves the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from tempo_plugin.algorithms.flash_reinforce import trajectory_gate
from tempo_plugin.algorithms.losses import (
    centred_score_loss,
    clipped_policy_loss,
    importance_sampling_loss,
    ratio_masked_policy_loss,
    value_cross_entropy,
)
from tempo_plugin.logprobs import shareable_prefix, token_logprobs
from tempo_plugin.rollout.batches import collate, first_loss_column, micro_batches
from tempo_plugin.rollout.samples import FORECAST, VALUE, TrainSample


def grad_norm_of(grads: Sequence[torch.Tensor]) -> float:
    """The L2 norm of a list of gradient tensors taken together."""
    return float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads))) if grads else 0.0


@dataclass
class PolicyTrainer:
    model: Any
    optimizer: torch.optim.Optimizer
    pad_id: int
    temperature: float = 1.0
    eps_clip: float = 0.2
    eps_clip_high: float = 0.2
    grad_clip: float = 1.0
    tokens_per_micro_batch: int = 16384
    policy_loss: str = "ppo"  # or importance_sampling: unclipped, summed over tokens (config.py)
    trajectory_kl_gate: float | None = None  # FlashREINFORCE's delta (algorithms/flash_reinforce.py); None: no gate
    divergence_clip: bool = False  # BPCO: the ratio clipped to [1 - eps/p_t, 1 + eps/p_t], p_t the sampler's probability
    ratio_mask: bool = False  # SAO: tokens whose ratio leaves [1 - eps, 1 + eps] get no gradient (no clipping)
    score_centering: int = 0  # K > 0: StableReinforce's Monte-Carlo score centering with K draws per token

    def step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """Accumulate the loss over all samples, clip, step. No samples: no step, empty metrics."""
        if not samples:
            return {"train/loss": 0.0, "train/skipped": 1.0}
        device = next(self.model.parameters()).device
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = len(samples)
        loss_sum = clip_sum = kl_sum = logprob_gap = value_loss_sum = forecast_loss_sum = trajectory_kl_sum = 0.0
        gated = trajectories = 0
        trained = [p for p in self.model.parameters() if p.requires_grad]
        value_grad_sum = [torch.zeros_like(p) for p in trained] if any(s.role == VALUE for s in samples) else []
        gap_count = model_tokens = 0
        for batch in micro_batches(samples, self.tokens_per_micro_batch):
            tensors = collate(batch, self.pad_id, device)
            first = first_loss_column(tensors["loss_mask"])
            shared = shareable_prefix(self.model, tensors["input_ids"], tensors["attention"], first)
            logprobs = token_logprobs(self.model, tensors["input_ids"], tensors["attention"], self.temperature, first,
                                      shared, self.score_centering)
            if self.score_centering:
                logprobs, centre = logprobs[..., 0], logprobs[..., 1]
            model_tokens += sum(len(s.tokens) for s in batch) - (len(batch) - 1) * shared
            # cross-entropy rows (VALUE answers, CoPE's FORECAST episodes) and policy-gradient rows
            # share the forward pass
            is_value, is_forecast = tensors["is_value"], tensors["is_forecast"]
            values = int(is_value.sum())
            sampled_mask = tensors["loss_mask"] * (~(is_value | is_forecast))[:, None].to(tensors["loss_mask"].dtype)
            policy_mask, kept = sampled_mask, len(batch) - values - int(is_forecast.sum())
            if self.trajectory_kl_gate is not None and kept:
                # FlashREINFORCE: a row whose mean Bernoulli KL exceeds delta leaves the loss but
                # still counts in the mean over samples, L = (1/B) sum_i m_i l_i
                keep, kl = trajectory_gate(logprobs, tensors["old_logprobs"], sampled_mask, self.trajectory_kl_gate)
                rows = sampled_mask.sum(dim=1) > 0
                trajectory_kl_sum += kl[rows].sum().item()
                trajectories += int(rows.sum())
                gated += int((rows & ~keep).sum())
                policy_mask = sampled_mask * keep[:, None].to(sampled_mask.dtype)
                kept = int((rows & keep).sum())
            if self.policy_loss == "importance_sampling":
                out = importance_sampling_loss(logprobs, tensors["old_logprobs"], tensors["advantages"], policy_mask)
                share = 1.0  # a sum over all samples' tokens: micro-batches add up
            else:
                eps_low, eps_high = self.eps_clip, self.eps_clip_high
                if self.divergence_clip:  # a probability change of at most eps, whatever p_t
                    sampler_p = tensors["old_logprobs"].exp()
                    eps_low, eps_high = eps_low / sampler_p, eps_high / sampler_p
                loss_of = ratio_masked_policy_loss if self.ratio_mask else clipped_policy_loss
                out = loss_of(logprobs, tensors["old_logprobs"], tensors["advantages"], policy_mask, eps_low, eps_high)
                share = kept / total  # a mean over samples
            policy_loss = out.loss
            if self.score_centering and kept:
                policy_loss = policy_loss + centred_score_loss(centre, tensors["advantages"], policy_mask, out.active,
                                                               summed=self.policy_loss == "importance_sampling")
            policy_loss = policy_loss * share
            if values or is_forecast.any():  # per row: -sum_t w_t log pi_theta(y_t)
                cross_entropy = value_cross_entropy(logprobs, tensors["advantages"], tensors["loss_mask"])
            if is_forecast.any():
                forecast_loss = cross_entropy[is_forecast].sum() / total
                forecast_loss_sum += forecast_loss.item()
                policy_loss = policy_loss + forecast_loss
            loss = policy_loss.detach()
            if values:
                # the value cross-entropy's gradient kept apart until the step, so that its share of
                # the gradient norm can be reported (train/value_grad_share)
                value_loss = cross_entropy[is_value].sum() / total
                value_grads = torch.autograd.grad(value_loss, trained, retain_graph=True, allow_unused=True)
                for acc, grad in zip(value_grad_sum, value_grads):
                    if grad is not None:
                        acc.add_(grad)
                value_loss_sum += value_loss.item()
                loss = loss + value_loss.detach()
            if len(batch) > values:
                policy_loss.backward()
            weight = kept / total
            loss_sum += loss.item()
            clip_sum += out.clip_fraction.item() * weight
            kl_sum += out.approx_kl.item() * weight
            mask = sampled_mask > 0  # policy-gradient rows only, gated or not
            logprob_gap += (logprobs.detach() - tensors["old_logprobs"]).abs()[mask].sum().item()
            gap_count += int(mask.sum().item())
        value_norm = policy_norm = 0.0
        if value_grad_sum:
            policy_norm = grad_norm_of([p.grad for p in trained if p.grad is not None])
            value_norm = grad_norm_of(value_grad_sum)
            for param, acc in zip(trained, value_grad_sum):
                param.grad = acc if param.grad is None else param.grad + acc
        grad_norm = torch.nn.utils.clip_grad_norm_(trained, self.grad_clip)
        self.optimizer.step()
        self.model.eval()
        return {
            "train/loss": loss_sum,
            "train/value_loss": value_loss_sum,  # the value cross-entropy's share of train/loss
            # |g_value| / (|g_value| + |g_policy|), before clipping: the critic's share of the step
            "train/value_grad_share": value_norm / (value_norm + policy_norm) if value_norm + policy_norm > 0 else 0.0,
            "train/clip_fraction": clip_sum,
            **({} if self.trajectory_kl_gate is None else {
                "train/gated_samples": float(gated),  # episodes the trajectory gate left out
                "train/trajectory_kl": trajectory_kl_sum / max(trajectories, 1),  # their mean D_bar, gated or not
            }),
            **({"train/forecast_loss": forecast_loss_sum} if any(s.role == FORECAST for s in samples) else {}),
            "train/approx_kl": kl_sum,
            "train/grad_norm": float(grad_norm),
            "train/sampler_logprob_abs_diff": logprob_gap / max(gap_count, 1),
            "train/loss_tokens": float(gap_count),
            "train/tokens": float(sum(len(s.tokens) for s in samples)),
            "train/model_tokens": float(model_tokens),  # those run through the model: a shared prefix once
        }


def more_steps(trainer: PolicyTrainer, samples: Sequence[TrainSample], count: int) -> dict[str, float]:
    """``count`` more steps of ``trainer`` on the same samples (--policy-epochs: their ratios move off
    1); what the last of them saw, ``train/last_epoch_*`` (the first step's are the update's own
    ``train/*``), or nothing when none is taken."""
    last: dict[str, float] = {}
    for _ in range(count if samples else 0):
        last = trainer.step(samples)
    if not last:
        return {}
    return {"train/last_epoch_clip_fraction": last.get("train/clip_fraction", 0.0),
            "train/last_epoch_approx_kl": last.get("train/approx_kl", 0.0)}

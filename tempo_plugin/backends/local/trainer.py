"""One optimiser step on a list of TrainSamples with the clipped policy-gradient loss.

Samples are packed into right-padded micro-batches (sorted by length, at most
``tokens_per_micro_batch`` padded tokens each); each micro-batch's loss is weighted by its share
of the samples, so the accumulated gradient equals that of the mean over all samples. Then the
gradient norm is clipped and AdamW steps once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import torch

from tempo_plugin.algorithms.losses import clipped_policy_loss
from tempo_plugin.rollout.samples import TrainSample

T = TypeVar("T")


def token_logprobs(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, temperature: float,
                   first: int = 1) -> torch.Tensor:
    """[B, T] log-prob of token t given tokens < t, for t >= ``first`` (earlier columns are 0).

    Only the logits that predict tokens ``first`` .. T-1 are computed (the model's
    ``logits_to_keep``): a training sample's long context needs hidden states, not logits."""
    first = max(1, min(first, input_ids.shape[1]))
    keep = input_ids.shape[1] - first + 1
    logits = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=keep).logits[:, :-1, :].float()
    log_dist = torch.log_softmax(logits / temperature, dim=-1)
    picked = log_dist.gather(-1, input_ids[:, first:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(input_ids[:, :first], dtype=picked.dtype), picked], dim=1)


def first_loss_column(loss_mask: torch.Tensor) -> int:
    """The first column any row trains on (1 when none does)."""
    columns = torch.nonzero(loss_mask.sum(dim=0) > 0)
    return int(columns[0]) if len(columns) else 1


def chunk_by_token_budget(items: Sequence[T], length: Callable[[T], int], tokens_per_chunk: int) -> list[list[T]]:
    """Consecutive chunks, in order, whose padded size (count x longest item) fits the budget; an
    item longer than the budget gets a chunk of its own."""
    chunks: list[list[T]] = []
    current: list[T] = []
    width = 0
    for item in items:
        size = length(item)
        if current and (len(current) + 1) * max(width, size) > tokens_per_chunk:
            chunks.append(current)
            current, width = [], 0
        current.append(item)
        width = max(width, size)
    if current:
        chunks.append(current)
    return chunks


def micro_batches(samples: Sequence[TrainSample], tokens_per_micro_batch: int) -> list[list[TrainSample]]:
    """Training micro-batches: samples sorted by length (less padding), chunked by the token budget."""
    ordered = sorted(samples, key=lambda s: len(s.tokens))
    return chunk_by_token_budget(ordered, lambda s: len(s.tokens), tokens_per_micro_batch)


def pad_rows(rows: Sequence[Sequence[float]], value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[len(rows), longest row] tensor, each row left-aligned and padded with ``value``."""
    out = torch.full((len(rows), max(len(row) for row in rows)), value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out.to(device)


def collate(samples: Sequence[TrainSample], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {
        "input_ids": pad_rows([s.tokens for s in samples], pad_id, torch.long, device),
        "attention": pad_rows([[1] * len(s.tokens) for s in samples], 0, torch.long, device),
        "loss_mask": pad_rows([s.loss_mask for s in samples], 0, torch.float32, device),
        "old_logprobs": pad_rows([s.old_logprobs for s in samples], 0.0, torch.float32, device),
        "advantages": pad_rows([s.advantages for s in samples], 0.0, torch.float32, device),
    }


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

    def step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """Accumulate the loss over all samples, clip, step. No samples: no step, empty metrics."""
        if not samples:
            return {"train/loss": 0.0, "train/skipped": 1.0}
        device = next(self.model.parameters()).device
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = len(samples)
        loss_sum = clip_sum = kl_sum = logprob_gap = 0.0
        gap_count = 0
        for batch in micro_batches(samples, self.tokens_per_micro_batch):
            tensors = collate(batch, self.pad_id, device)
            logprobs = token_logprobs(self.model, tensors["input_ids"], tensors["attention"], self.temperature,
                                      first=first_loss_column(tensors["loss_mask"]))
            out = clipped_policy_loss(
                logprobs, tensors["old_logprobs"], tensors["advantages"], tensors["loss_mask"],
                self.eps_clip, self.eps_clip_high,
            )
            (out.loss * len(batch) / total).backward()
            weight = len(batch) / total
            loss_sum += out.loss.item() * weight
            clip_sum += out.clip_fraction.item() * weight
            kl_sum += out.approx_kl.item() * weight
            mask = tensors["loss_mask"] > 0
            logprob_gap += (logprobs.detach() - tensors["old_logprobs"]).abs()[mask].sum().item()
            gap_count += int(mask.sum().item())
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], self.grad_clip)
        self.optimizer.step()
        self.model.eval()
        return {
            "train/loss": loss_sum,
            "train/clip_fraction": clip_sum,
            "train/approx_kl": kl_sum,
            "train/grad_norm": float(grad_norm),
            "train/sampler_logprob_abs_diff": logprob_gap / max(gap_count, 1),
            "train/loss_tokens": float(gap_count),
            "train/tokens": float(sum(len(s.tokens) for s in samples)),
        }

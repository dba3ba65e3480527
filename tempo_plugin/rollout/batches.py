"""Training samples as tensors: micro-batches under a token budget, right-padded rows, the first
trained column."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import torch

from tempo_plugin.rollout.samples import FORECAST, VALUE, TrainSample

T = TypeVar("T")


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
    """Training micro-batches, chunked by the token budget: each group of samples with the same
    prompt (context before the first trained token) on its own, so ``token_logprobs`` runs that
    prompt once; then the samples whose prompt no other has, sorted by length (less padding)."""
    def length(sample: TrainSample) -> int:
        return len(sample.tokens)

    by_prompt: dict[tuple[int, ...], list[TrainSample]] = {}
    for sample in samples:
        by_prompt.setdefault(tuple(sample.tokens[: sample.prompt_length]), []).append(sample)
    groups = [group for group in by_prompt.values() if len(group) > 1]
    alone = [group[0] for group in by_prompt.values() if len(group) == 1]
    return [batch for group in groups + [alone] if group
            for batch in chunk_by_token_budget(sorted(group, key=length), length, tokens_per_micro_batch)]


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
        "is_value": torch.tensor([s.role == VALUE for s in samples], dtype=torch.bool, device=device),
        "is_forecast": torch.tensor([s.role == FORECAST for s in samples], dtype=torch.bool, device=device),
    }

"""Training samples: what either runtime needs to apply one update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

ACTOR = "actor"
CRITIC = "critic"
VALUE = "value"  # the value cross-entropy's teacher-forced answers: loss -w log pi, no ratio (critic/readout.py)
FORECAST = "forecast"  # CoPE's successful episodes, teacher-forced: loss -w log pi, no ratio (algorithms/cope.py)


@dataclass(frozen=True)
class TrainSample:
    """Per-token arrays aligned with ``tokens``: entry i belongs to token i (predicted from tokens[:i]).

    Context tokens (saved prefix, observations, assistant-closing tokens, critic prompt) carry
    mask 0, old log-prob 0 and advantage 0; trained tokens carry the sampler log-prob and the
    sample's advantage. A ``VALUE`` sample was not sampled: its old log-probs are 0 and its
    "advantages" are the cross-entropy weight of each token.
    """

    tokens: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    advantages: list[float]
    role: str
    group: int
    reward: float  # raw return (actor) or raw critic reward, for logging

    @property
    def prompt_length(self) -> int:
        return self.loss_mask.index(1) if 1 in self.loss_mask else len(self.tokens)


def make_sample(
    tokens: Sequence[int],
    loss_mask: Sequence[int],
    logprobs: Sequence[float],
    advantage: float | Sequence[float],
    role: str,
    group: int,
    reward: float,
) -> TrainSample:
    """Trim trailing context (it carries no loss) and broadcast the advantage to the trained tokens.

    ``advantage`` is one number for every trained token, or one per round: the i-th run of
    consecutive trained tokens (the i-th completion of a multi-turn sequence) gets ``advantage[i]``.
    """
    if not (len(tokens) == len(loss_mask) == len(logprobs)):
        raise ValueError("tokens, loss_mask and logprobs must have equal lengths")
    end = max((i + 1 for i, m in enumerate(loss_mask) if m), default=0)
    if end == 0:
        raise ValueError(f"{role} sample of group {group} has no trained tokens")
    mask = [int(m) for m in loss_mask[:end]]
    if isinstance(advantage, (int, float)):
        advantages = [float(advantage) if m else 0.0 for m in mask]
    else:
        advantages = per_run_values(mask, advantage)
    return TrainSample(
        tokens=list(tokens[:end]),
        loss_mask=mask,
        old_logprobs=[float(lp) if m else 0.0 for lp, m in zip(logprobs[:end], mask)],
        advantages=advantages,
        role=role,
        group=group,
        reward=reward,
    )


def per_run_values(mask: Sequence[int], values: Sequence[float]) -> list[float]:
    """``values[i]`` on every position of the i-th run of 1s in ``mask``, 0.0 elsewhere; one value per run."""
    starts = [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]
    if len(starts) != len(values):
        raise ValueError(f"{len(values)} per-round advantages for {len(starts)} completions")
    out: list[float] = []
    run = -1
    for i, m in enumerate(mask):
        if m and (i == 0 or not mask[i - 1]):
            run += 1
        out.append(float(values[run]) if m else 0.0)
    return out

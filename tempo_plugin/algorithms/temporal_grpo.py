"""Temporal GRPO: stage-conditioned advantages (docs/algorithms.md section 3).

A task is a linear prerequisite chain of stages m_1 -> ... -> m_K, the last one being task success.
For a group of rollouts i = 1..N of one task:

    R_{i,k} in {0,1}    rollout i completed stage k                                 (Eq. 21)
    V_{i,k} in {0,1}    rollout i entered stage k: V_{i,1} = 1, V_{i,k} = prod_{j<k} R_{i,j}

Statistics over the participants of each stage only (biased std, n_k = sum_i V_{i,k}):

    mu_k     = (1/n_k) sum_i V_{i,k} R_{i,k}
    sigma_k  = sqrt( (1/n_k) sum_i V_{i,k} (R_{i,k} - mu_k)^2 )                      (Eq. 22)
    A_{i,k}  = (R_{i,k} - mu_k) / (sigma_k + eps)     if V_{i,k} = 1                 (Eq. 23)
    A_{i,k}  = 0                                      if V_{i,k} = 0
    A_{i,k}  = 0 for all i                            if n_k < 2 or sigma_k = 0  (degenerate stage)

Alignment, in the spec's 1-based time t = 1..T_i with tau_{i,0} = 0 and tau_{i,k} the first timestep
after tau_{i,k-1} at which stage k's predicate holds:

    B_{i,k}  = (tau_{i,k-1}, tau_{i,k}]    if stage k was completed, else (tau_{i,k-1}, T_i]
    A_{i,t}  = sum_k 1[t in B_{i,k}] A_{i,k}                                         (Eq. 24)

Here rounds are 0-based, r = t - 1, and c_k = tau_k - 1 is the round whose action completed stage k
(stages 0-based too). Round r belongs to stage k iff c_{k-1} < r <= c_k with c_{-1} = -1, i.e.

    stage(r) = min( #{k : c_k < r}, K - 1 )

the number of stages completed strictly before round r: the completing round belongs to the stage it
completed, rounds after the last completed stage belong to the next stage, and rounds after the final
stage (none in a finished episode) are given to the last stage.
"""

from __future__ import annotations

import bisect
import operator
from typing import Sequence

import torch

BinaryMatrix = torch.Tensor | Sequence[Sequence[int | bool]]


def _binary_matrix(values: BinaryMatrix, name: str) -> torch.Tensor:
    """A [rollouts x stages] 0/1 array as a float64 tensor; ValueError otherwise."""
    try:
        t = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name} is not a rectangular array: {exc}".replace("\n", " ")) from None
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D [rollouts x stages], got shape {tuple(t.shape)}")
    t = t.to(torch.float64)
    if not bool(((t == 0) | (t == 1)).all()):
        raise ValueError(f"{name} entries must be 0 or 1")
    return t


def stage_advantages(stage_outcomes: BinaryMatrix, participation: BinaryMatrix, eps: float = 1e-6) -> torch.Tensor:
    """A_{i,k} (Eq. 23) for one group: float64 [rollouts x stages], 0 off participation and on
    degenerate stages (fewer than 2 participants, or sigma_k = 0).

    ``stage_outcomes`` (R) and ``participation`` (V) are [rollouts x stages] 0/1 tensors or nested
    lists of equal shape, with R = 1 only where V = 1. ``eps`` >= 0 is added to sigma_k.
    """
    r = _binary_matrix(stage_outcomes, "stage_outcomes")
    v = _binary_matrix(participation, "participation")
    if r.shape != v.shape:
        raise ValueError(
            f"stage_outcomes and participation must have the same shape, got {tuple(r.shape)} and {tuple(v.shape)}"
        )
    if bool(((r == 1) & (v == 0)).any()):
        raise ValueError("stage_outcomes is 1 where participation is 0 (a stage completed without being entered)")
    if not 0.0 <= float(eps) < float("inf"):
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    n = v.sum(dim=0)                                              # n_k
    n_safe = n.clamp(min=1.0)
    mu = (v * r).sum(dim=0) / n_safe                              # mu_k
    sigma = torch.sqrt((v * (r - mu) ** 2).sum(dim=0) / n_safe)   # sigma_k (biased)
    adv = v * (r - mu) / (sigma + eps)                            # A_{i,k}, 0 where V = 0
    degenerate = (n < 2) | (sigma == 0)
    return torch.where(degenerate, torch.zeros_like(adv), adv)


def participation_from_outcomes(stage_outcomes: BinaryMatrix) -> torch.Tensor:
    """V_{i,1} = 1, V_{i,k} = prod_{j<k} R_{i,j} for a linear chain, int64 [rollouts x stages].

    Raises ValueError if an outcome is 1 on a stage whose prerequisites were not all completed.
    """
    r = _binary_matrix(stage_outcomes, "stage_outcomes")
    rollouts, stages = r.shape
    if stages == 0:
        return r.to(torch.int64)
    first = torch.ones(rollouts, 1, dtype=torch.float64)             # V_{i,1} = 1
    v = torch.cat([first, torch.cumprod(r[:, :-1], dim=1)], dim=1)   # V_{i,k} = prod_{j<k} R_{i,j}
    if bool(((r == 1) & (v == 0)).any()):
        raise ValueError("stage_outcomes has a completed stage after an uncompleted one (not a linear chain)")
    return v.to(torch.int64)


def stage_of_rounds(completion_rounds: Sequence[int | None], num_rounds: int) -> list[int]:
    """stage(r) = min(#{k : c_k < r}, K - 1) for rounds r = 0..num_rounds-1 of one rollout.

    ``completion_rounds[k]`` = c_k, the 0-based round whose action first completed stage k (chain
    order), or None if stage k was never completed. Round c_k itself belongs to stage k, rounds
    c_{k-1}+1..c_k form stage k's interval, and the rounds after the last completed stage belong to
    the next stage (all rounds belong to stage 0 when nothing was completed). Two stages completed
    by the same round give the later one an empty interval. Rounds after the final stage (task
    success) belong to the last stage.

    Raises ValueError unless K >= 1, num_rounds >= 0, each c_k is an int in [0, num_rounds), the c_k
    are non-decreasing, and no completed stage follows an uncompleted one.
    """
    if num_rounds < 0:
        raise ValueError(f"num_rounds must be >= 0, got {num_rounds}")
    stages = len(completion_rounds)
    if stages == 0:
        raise ValueError("stage_of_rounds needs at least one stage (K >= 1)")
    completed: list[int] = []                                     # c_0 .. c_{m-1}
    for k, c in enumerate(completion_rounds):
        if c is None:
            continue
        if len(completed) != k:
            raise ValueError(f"stage {k} completed after an uncompleted stage: {list(completion_rounds)}")
        if isinstance(c, bool):
            raise ValueError(f"completion round of stage {k} must be an int or None, got {c!r}")
        try:
            c = operator.index(c)
        except TypeError:
            raise ValueError(f"completion round of stage {k} must be an int or None, got {c!r}") from None
        if not 0 <= c < num_rounds:
            raise ValueError(f"completion round {c} of stage {k} is outside rounds 0..{num_rounds - 1}")
        if completed and c < completed[-1]:
            raise ValueError(f"completion rounds must be non-decreasing, got {list(completion_rounds)}")
        completed.append(c)
    return [min(bisect.bisect_left(completed, r), stages - 1) for r in range(num_rounds)]


def round_advantages(stage_of_round: Sequence[int], advantages_row: torch.Tensor | Sequence[float]) -> list[float]:
    """A_{i,r} = A_{i,stage(r)} (Eq. 24): each round gets the advantage of the stage it was working on.

    ``advantages_row`` is rollout i's row of ``stage_advantages`` (K values); every stage index must
    lie in 0..K-1 (ValueError otherwise).
    """
    row = torch.as_tensor(advantages_row, dtype=torch.float64)
    if row.dim() != 1:
        raise ValueError(f"advantages_row must be 1-D (one advantage per stage), got shape {tuple(row.shape)}")
    values = row.tolist()
    stages = len(values)
    out = []
    for r, k in enumerate(stage_of_round):
        try:
            index = operator.index(k) if not isinstance(k, bool) else -1
        except TypeError:
            index = -1
        if not 0 <= index < stages:
            raise ValueError(f"round {r} has stage {k!r}, outside stages 0..{stages - 1}")
        out.append(values[index])
    return out

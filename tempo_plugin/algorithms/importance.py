"""Prefix importance-sampling correction for restored start states (docs/algorithms.md section 1.6).

A start state s was reached by a prefix whose assistant tokens y_j were sampled by older policies
pi_old_j. The environment's transition probabilities cancel in the prefix likelihood ratio, so only
the policy's own tokens appear:

    w(s)     = prod_{j in assistant tokens of prefix(s)} pi_theta(y_j | ctx_j) / pi_old_j(y_j | ctx_j)
    log w(s) = L_cur(s) - L_old(s)

with L_cur(s) and L_old(s) the sums of the prefix's assistant-token log-probs under the current and
the old policy (same engine for both). A fresh state has L_old = L_cur = 0, so log w = 0 and w = 1
exactly.

Variance control, one weight per state, over a batch of n states g = 1..n:

    w~(s)    = min(w(s), C)                              truncated IS (C = ``clip``, slime's tis_clip 2.0)
    w^_g     = w~_g / ((1/n) sum_h w~_h)                 optional self-normalisation within the batch
    d(s)     = current_version - policy_version(s)       staleness
    keep(s)  = d(s) <= S_max                             optional staleness cap (no cap when S_max is None)

w~ is computed as min(exp(min(log w, ln C + 1)), C): the inner clamp keeps exp finite for any log
ratio (1e4 gives C, not inf), and every weight it touches lies above C, so the outer truncation
still returns exactly C for them.

Diagnostics (metrics ``is/*``), with w the weights actually applied:

    log_w_mean     = (1/n) sum_s log w(s)                untruncated log ratio
    log_w_max      = max_s log w(s)
    clip_frac      = (1/n) #{s : log w(s) > ln C}         share of states truncated (w > C)
    ess            = (sum_s w_s)^2 / (n sum_s w_s^2)      in (0, 1]; 1 when all weights are equal
    staleness_mean = (1/n) sum_s d(s)

The actor applies the weight to every branch of the group of s: A_n <- w~(s) (R_n - G(s)); the
critic reward stays unweighted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class ImportanceStats:
    log_w_mean: float
    log_w_max: float
    clip_frac: float
    ess: float
    staleness_mean: float


def _check_clip(clip: float) -> float:
    try:
        c = float(clip)
    except (TypeError, ValueError):
        c = math.nan
    if not 0.0 < c < math.inf:
        raise ValueError(f"clip C must be a finite number > 0, got {clip!r}")
    return c


def _vector(values: torch.Tensor | Sequence[float], name: str) -> torch.Tensor:
    t = torch.as_tensor(values)
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one value per state), got shape {tuple(t.shape)}")
    return t


def _log_ratio(logp_current: torch.Tensor, logp_old: torch.Tensor) -> torch.Tensor:
    """log w = L_cur - L_old in float64 (long prefixes sum to thousands, where float32 is coarse)."""
    l_cur = _vector(logp_current, "logp_current")
    l_old = _vector(logp_old, "logp_old")
    if l_cur.shape != l_old.shape:
        raise ValueError(
            f"logp_current and logp_old must have the same shape, got {tuple(l_cur.shape)} and {tuple(l_old.shape)}"
        )
    l_cur, l_old = l_cur.to(torch.float64), l_old.to(torch.float64)
    if not (bool(torch.isfinite(l_cur).all()) and bool(torch.isfinite(l_old).all())):
        raise ValueError("logp_current and logp_old must be finite (no nan/inf prefix log-prob sums)")
    return l_cur - l_old


def _result_dtype(*tensors: torch.Tensor | Sequence[float]) -> torch.dtype:
    dtype = torch.as_tensor(tensors[0]).dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, torch.as_tensor(t).dtype)
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def prefix_weights(logp_current: torch.Tensor, logp_old: torch.Tensor, clip: float = 2.0) -> torch.Tensor:
    """w~(s) = min(exp(L_cur(s) - L_old(s)), C), one weight per state.

    ``logp_current`` and ``logp_old`` are 1-D, one prefix log-prob sum per state (0 for a fresh
    state, whose weight is then exactly 1). The result has their floating dtype (the default dtype
    for integer inputs); the ratio itself is computed in float64. Raises ValueError on a shape
    mismatch, non-1-D input, non-finite input, or C not in (0, inf).
    """
    c = _check_clip(clip)
    log_w = _log_ratio(logp_current, logp_old)
    w = torch.exp(torch.clamp(log_w, max=math.log(c) + 1.0))
    w_trunc = torch.clamp(w, max=c)
    return w_trunc.to(_result_dtype(logp_current, logp_old))


def self_normalise(weights: torch.Tensor) -> torch.Tensor:
    """w^_g = w~_g / mean_h(w~_h) over the 1-D batch ``weights`` (mean 1 afterwards).

    Empty input returns an empty tensor. When every weight is 0 (all prefixes far less likely now,
    exp underflowed) the mean is 0 and the weights are returned unchanged: all zero, i.e. the batch
    carries no actor signal, rather than 0/0 = nan. Raises ValueError on non-1-D, non-finite or
    negative weights.
    """
    w = _vector(weights, "weights")
    if not w.is_floating_point():
        w = w.to(torch.get_default_dtype())
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("weights must be finite and >= 0")
    if w.numel() == 0:
        return w.clone()
    mean = w.mean()
    if mean == 0:
        return w.clone()
    return w / mean


def policy_staleness(policy_versions: torch.Tensor | Sequence[int], current_version: int) -> torch.Tensor:
    """d(s) = current_version - policy_version(s), int64, one per state; ValueError if any d(s) < 0."""
    v = torch.as_tensor(policy_versions)
    if v.dim() != 1:
        raise ValueError(f"policy_versions must be 1-D (one version per state), got shape {tuple(v.shape)}")
    if v.numel() == 0:
        return torch.zeros(0, dtype=torch.int64)
    if v.is_floating_point() or v.dtype == torch.bool or v.is_complex():
        raise ValueError(f"policy_versions must be integers, got dtype {v.dtype}")
    d = int(current_version) - v.to(torch.int64)
    if bool((d < 0).any()):
        raise ValueError(f"a policy_version is newer than current_version {current_version}: {v.tolist()}")
    return d


def stale_mask(
    policy_versions: torch.Tensor | Sequence[int], current_version: int, max_staleness: int | None
) -> torch.Tensor:
    """keep(s) = current_version - policy_version(s) <= S_max, a bool tensor (True = keep).

    ``max_staleness`` None means no cap (every state kept); a negative value raises ValueError, as
    does a state whose version is newer than ``current_version``. S_max = 0 keeps only states of the
    current policy version.
    """
    d = policy_staleness(policy_versions, current_version)
    if max_staleness is None:
        return torch.ones_like(d, dtype=torch.bool)
    if int(max_staleness) < 0:
        raise ValueError(f"max_staleness must be >= 0 or None (no cap), got {max_staleness}")
    return d <= int(max_staleness)


def importance_stats(
    logp_current: torch.Tensor,
    logp_old: torch.Tensor,
    weights: torch.Tensor,
    clip: float,
    staleness: torch.Tensor | Sequence[int],
) -> ImportanceStats:
    """log_w_mean, log_w_max, clip_frac (raw w > C), ess on ``weights`` (the weights actually
    applied: truncated, possibly self-normalised; ESS is scale-free), staleness_mean over
    ``staleness`` (d(s) per state, e.g. from ``policy_staleness``). All inputs are 1-D of one length n.

    Empty batch (n = 0): the values of a batch needing no correction, log_w_mean = log_w_max = 0,
    clip_frac = 0, ess = 1, staleness_mean = 0 (finite, so metric logging never sees nan). All
    weights 0 (sum w^2 = 0): ess = 0, no effective sample.
    """
    c = _check_clip(clip)
    log_w = _log_ratio(logp_current, logp_old)
    w = _vector(weights, "weights").to(torch.float64)
    d = _vector(staleness, "staleness").to(torch.float64)
    n = log_w.numel()
    if w.numel() != n or d.numel() != n:
        raise ValueError(
            f"importance_stats needs n values each, got log-probs={n}, weights={w.numel()}, staleness={d.numel()}"
        )
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("weights must be finite and >= 0")
    if not bool(torch.isfinite(d).all()) or bool((d < 0).any()):
        raise ValueError("staleness must be finite and >= 0")
    if n == 0:
        return ImportanceStats(log_w_mean=0.0, log_w_max=0.0, clip_frac=0.0, ess=1.0, staleness_mean=0.0)
    sum_w = w.sum()
    sum_w2 = (w * w).sum()
    ess = float(sum_w * sum_w / (n * sum_w2)) if sum_w2 > 0 else 0.0
    return ImportanceStats(
        log_w_mean=float(log_w.mean()),
        log_w_max=float(log_w.max()),
        clip_frac=float((log_w > math.log(c)).to(torch.float64).mean()),
        ess=ess,
        staleness_mean=float(d.mean()),
    )

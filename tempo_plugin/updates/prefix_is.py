"""Prefix importance weights of TD start states (``--prefix-is-clip``; ``algorithms.importance``)."""

from __future__ import annotations

from typing import Sequence

from tempo_plugin.algorithms.stats import mean
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.rollout.sampler import Sampler
from tempo_plugin.states.state import MacroState


def check_prefix_scoring(cfg: TempoConfig, sampler: Sampler) -> None:
    """--prefix-is-clip scores prompts: refuse a sampler that cannot."""
    if cfg.prefix_is_clip > 0 and not callable(getattr(sampler, "prompt_logprobs", None)):
        raise ConfigError(f"--prefix-is-clip needs a sampler that scores prompts (prompt_logprobs); "
                          f"{type(sampler).__name__} does not: pass --prefix-is-clip 0")


def start_state_weights(cfg: TempoConfig, sampler: Sampler, update: int,
                        states: Sequence[MacroState]) -> tuple[list[float], dict[str, float]]:
    """The prefix importance weight of each start state (``algorithms.importance``) and the is/*
    metrics; all 1 (and no metrics) without --prefix-is-clip.

    A stored state's prefix holds assistant tokens sampled by earlier policies: L_old(s) is the
    sum of their sampler log-probs, saved with the state; L_cur(s) the same tokens' log-probs
    under the sampler's current policy (one prefill per state, ``prompt_logprobs``). Then
    w~ = min(exp(L_cur - L_old), C), zeroed for states more than --prefix-is-max-staleness
    updates old, optionally divided by the batch mean. A fresh game has no assistant tokens: w = 1.
    """
    weights = [1.0] * len(states)
    if cfg.prefix_is_clip <= 0:
        return weights, {}
    # torch only here: slime imports this module in processes that must not load it (hooks)
    import torch

    from tempo_plugin.algorithms.importance import (
        importance_stats,
        policy_staleness,
        prefix_weights,
        self_normalise,
        stale_mask,
    )

    scored = [i for i, s in enumerate(states) if s.assistant_spans]
    metrics = {"is/scored_states": float(len(scored))}
    if not scored:
        return weights, metrics
    rows = sampler.prompt_logprobs([list(states[i].token_prefix) for i in scored], cfg.temperature)
    l_cur = torch.tensor([sum(sum(row[a:b]) for a, b in states[i].assistant_spans) for i, row in zip(scored, rows)],
                         dtype=torch.float64)
    l_old = torch.tensor([states[i].prefix_logprob_sum for i in scored], dtype=torch.float64)
    w = prefix_weights(l_cur, l_old, clip=cfg.prefix_is_clip)
    staleness = policy_staleness([states[i].policy_version for i in scored], update)
    if cfg.prefix_is_max_staleness >= 0:
        keep = stale_mask([states[i].policy_version for i in scored], update, cfg.prefix_is_max_staleness)
        w = w * keep
        metrics["is/stale_states"] = float((~keep).sum())
    if cfg.prefix_is_normalise:
        w = self_normalise(w)
    stats = importance_stats(l_cur, l_old, w, cfg.prefix_is_clip, staleness)
    for i, weight in zip(scored, w.tolist()):
        weights[i] = weight
    metrics.update({"is/log_w_mean": stats.log_w_mean, "is/log_w_max": stats.log_w_max, "is/clip_frac": stats.clip_frac,
                    "is/ess": stats.ess, "is/staleness_mean": stats.staleness_mean, "is/weight_mean": mean(w.tolist())})
    return weights, metrics

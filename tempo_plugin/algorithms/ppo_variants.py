"""Three PPO variants from the survey, as changes to single-turn PPO (section 5 of docs/algorithms.md).

BPCO (a grounded critic, a length-adaptive lambda, divergence clipping). For a response of L tokens
with outcome R in [R_min, R_max] = [0, 1]:

    V_t in [0, 1]                                 the value head's output, clipped to the reward range
    lambda_pi(L) = 1 - 1 / (alpha L)              the actor's GAE lambda (clipped to [0, 1])
    lambda_V = 1                                  the critic's targets: the observed outcome itself
    rho_t clipped to [1 - eps / p_t, 1 + eps / p_t]      p_t the sampler's probability of token t

(divergence clipping bounds the change of the token's probability, p_t rho_t - p_t, by eps). Raw GAE
advantages, no division by the batch's standard deviation.

EasyPPO (a critic that learns E[R | s] without noise taking over):

    C_i = 1 if response i ended within the length limit        only those train the actor
    w_x = 1 / max(sigma_x, EASYPPO_SIGMA_FLOOR)                 sigma_x the return std of prompt x's N responses
    L_V = mean_{x,i,t} w_x (V(s_{i,t}) - R_i)^2 / 2             weights normalised to mean 1 over the batch
    g_clip = g min(1, c / |g|)                                  per critic minibatch, each its own step

SAO (one response per prompt against a learned baseline, run with --branches 1):

    w_t = rho_t 1[1 - eps_low < rho_t < 1 + eps_high]           l_t = -w_t A_t (losses.ratio_masked_policy_loss)
    A   = GAE(r, V; gamma, lambd)                               no observation tokens in a single turn: plain GAE
    the critic's attention layers frozen, SAO_CRITIC_PASSES x --critic-epochs critic steps per actor update
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

EASYPPO_SIGMA_FLOOR = 0.1  # the epsilon of w_x: a prompt every response of which scores alike weighs 1 / 0.1


@dataclass(frozen=True)
class PPOOptions:
    """How a value-model estimator departs from plain PPO (all off: PPO and TPPO)."""

    lambda_alpha: float | None = None  # BPCO: lambda_pi(L) = 1 - 1/(alpha L) and critic targets at lambda 1
    bounded_values: bool = False  # BPCO: V clipped to the reward range [0, 1]
    divergence_clip: bool = False  # BPCO: the ratio clipped to [1 - eps/p_t, 1 + eps/p_t]
    finished_actor_only: bool = False  # EasyPPO: responses cut at the length limit train the critic only
    noise_weighted_critic: bool = False  # EasyPPO: w_x = 1 / max(sigma_x, floor)
    critic_minibatches: int = 1  # EasyPPO: critic steps per pass, each on its share with its own clip
    ratio_band_mask: bool = False  # SAO: tokens whose ratio leaves the band get no gradient at all
    critic_passes: int = 1  # SAO: 2 critic passes (x --critic-epochs) per actor update
    freeze_critic_attention: bool = False  # SAO: the critic trains everything but its attention layers


def adaptive_lambda(length: int, alpha: float) -> float:
    """lambda_pi(L) = 1 - 1 / (alpha L), within [0, 1]."""
    if length < 1 or alpha <= 0:
        raise ValueError(f"length must be >= 1 and alpha > 0 (got {length}, {alpha})")
    return min(1.0, max(0.0, 1.0 - 1.0 / (alpha * length)))


def noise_weights(rewards: Sequence[float], group_size: int, floor: float = EASYPPO_SIGMA_FLOOR) -> list[float]:
    """Per response, w_x = 1 / max(sigma_x, floor) of its prompt's group of ``group_size`` (population
    std), scaled so that the weights average 1 over the batch."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    raw = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        raw += [1.0 / max(statistics.pstdev(group), floor)] * len(group)
    scale = statistics.fmean(raw) if raw else 1.0
    return [w / scale for w in raw]


def split_evenly(count: int, parts: int) -> list[range]:
    """``parts`` consecutive index ranges covering 0..count-1, sizes differing by at most one
    (fewer when count < parts; none empty)."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1 (got {parts})")
    parts = min(parts, count) or 1
    size, extra = divmod(count, parts)
    ranges, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        ranges.append(range(start, end))
        start = end
    return [r for r in ranges if len(r)]

"""SPO: a persistent per-game baseline (a discounted Beta tracker), batch-normalised advantages and
prioritised game sampling. No critic network and no group statistics.

Game x keeps Beta(alpha_x, beta_x); its value is

    v_hat(x) = alpha_x / (alpha_x + beta_x)         (alpha = beta = PRIOR before x is first played)

An update plays games x_1..x_S (N episodes each, returns R_i in [0, 1]); against the trackers as they
were before it:

    A_i  = R_i - v_hat_old(x_i)
    A~_i = (A_i - mean_B A) / (std_B A + eps)       over the update's batch B, eps = 1e-6

then each played game's tracker forgets by rho and counts the new outcomes:

    alpha_new = rho alpha_old + sum_i R_i,     beta_new = rho beta_old + sum_i (1 - R_i)

the moving average v_new = v_old + eta_x (R_bar - v_old) with eta_x = n / (rho (alpha + beta) + n).
Games are drawn without replacement from a fixed pool with probability proportional to

    w_x = sqrt(v_hat (1 - v_hat)) + W_MIN

so games the policy sometimes wins and sometimes loses (the most informative) come up most.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Sequence

PRIOR = 0.5  # alpha = beta of a game never played: v_hat = 1/2 with the weight of one episode
W_MIN = 0.05  # every game keeps some chance of being drawn, however settled its value
SPO_STD_EPSILON = 1e-6


def tracker_value(alpha: float, beta: float) -> float:
    """v_hat = alpha / (alpha + beta)."""
    return alpha / (alpha + beta)


def tracker_update(alpha: float, beta: float, returns: Sequence[float], rho: float) -> tuple[float, float]:
    """(rho alpha + sum R, rho beta + sum (1 - R)) for returns in [0, 1]."""
    if any(not 0.0 <= r <= 1.0 for r in returns):
        raise ValueError(f"the tracker counts returns in [0, 1] (got {list(returns)})")
    return rho * alpha + sum(returns), rho * beta + sum(1.0 - r for r in returns)


def spo_advantages(returns: Sequence[float], baselines: Sequence[float]) -> list[float]:
    """A~_i = (A_i - mean A) / (std A + eps) with A_i = R_i - v_hat_old(x_i), over the whole batch."""
    if len(returns) != len(baselines):
        raise ValueError(f"{len(returns)} returns but {len(baselines)} baselines")
    if not returns:
        return []
    advantages = [r - b for r, b in zip(returns, baselines)]
    mean, std = statistics.fmean(advantages), statistics.pstdev(advantages)
    return [(a - mean) / (std + SPO_STD_EPSILON) for a in advantages]


def priority(value: float) -> float:
    """w = sqrt(v (1 - v)) + W_MIN."""
    return math.sqrt(max(value * (1.0 - value), 0.0)) + W_MIN


def draw_prioritised(pool: Sequence[int], values: Sequence[float], count: int, seed: int) -> list[int]:
    """``count`` distinct games of ``pool``, each draw with probability proportional to the priority
    of its value among the games not yet drawn (seeded: the same seed draws the same games)."""
    if count > len(pool):
        raise ValueError(f"cannot draw {count} distinct games from a pool of {len(pool)}")
    rng = random.Random(seed)
    left = list(zip(pool, (priority(v) for v in values)))
    drawn = []
    for _ in range(count):
        point = rng.random() * sum(w for _, w in left)
        index = 0
        while index < len(left) - 1 and point >= left[index][1]:
            point -= left[index][1]
            index += 1
        drawn.append(left.pop(index)[0])
    return drawn

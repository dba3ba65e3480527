"""LVRL: anchored hindsight credit (docs/algorithms.md section 13).

A frozen model reads each finished episode of a group -- its actions, its outcome and how the
group fared -- and gives hindsight values V~_t after each round t = 1 .. T-1 (no critic is
trained). The endpoints are fixed by real outcomes: for episode i of a group G with returns R,

    V~_0 = R_bar_G = mean_{j in G} R_j,      V~_T = R_i
    A_t  = V~_{t+1} - V~_t                   t = 0 .. T-1, one advantage per round (action)
    sum_t A_t = R_i - R_bar_G                the outcome fixes the total, the model its spread

and every A_t of the group is divided by the group's step standard deviation,

    sigma_G = sqrt( mean over the group's rounds of A_t^2 )   (no centring: the anchors already centre)
    A~_t = A_t / (sigma_G + eps)

All tokens of one action share its advantage. The anchoring does not make the local attribution
right: a valuer that answers one value c everywhere puts all credit on the first action (c - R_bar)
and the last (R - c).
"""

from __future__ import annotations

import math
from typing import Sequence


def anchored_round_advantages(hindsight: Sequence[float], outcome: float, group_mean: float) -> list[float]:
    """A_t = V~_{t+1} - V~_t with V~ = [R_bar_G, *hindsight, R_i]: one advantage per round of an
    episode of len(hindsight) + 1 rounds."""
    values = [float(group_mean), *map(float, hindsight), float(outcome)]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"hindsight values, outcome and group mean must be finite, got {values}")
    return [values[t + 1] - values[t] for t in range(len(values) - 1)]


def normalised_by_group_steps(advantages: Sequence[Sequence[float]], eps: float = 1e-6) -> list[list[float]]:
    """A~_t = A_t / (sigma_G + eps), sigma_G the root mean square of every round advantage of the
    group's episodes (a list per episode); all zeros stay zeros."""
    flat = [a for row in advantages for a in row]
    if not flat:
        return [list(row) for row in advantages]
    sigma = math.sqrt(sum(a * a for a in flat) / len(flat))
    return [[a / (sigma + eps) for a in row] for row in advantages]

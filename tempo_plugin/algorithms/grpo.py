"""GRPO advantages (group-relative, outcome only), shared by single-turn GRPO and multi-turn GRPO.

For a group of G responses (single-turn) or G complete episodes of one game (multi-turn) with
returns R_1..R_G:

    A_i = (R_i - mean_j R_j) / (std_j R_j + eps)      (population std, eps = 1e-6)

Every trained token of response or episode i gets A_i. In multi-turn GRPO, R_i is the episode
return, so every action of an episode shares the credit of its outcome.
"""

from __future__ import annotations

import statistics
from typing import Sequence

GRPO_STD_EPSILON = 1e-6


def grpo_advantages(rewards: Sequence[float], group_size: int) -> list[float]:
    """(R_i - mean_g) / (std_g + eps) within consecutive groups of ``group_size`` (population std)."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean, std = statistics.fmean(group), statistics.pstdev(group)
        out += [(r - mean) / (std + GRPO_STD_EPSILON) for r in group]
    return out

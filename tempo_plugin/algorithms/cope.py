"""CoPE: multi-turn GRPO plus an action-forecasting loss on each game's successful episodes.

For game x with successful episodes S_x among its N, and h_t the history before action a_t:

    L_AF,x = - sum_{tau in S_x} sum_t log p_theta(a_t | h_t) / max(1, |S_x|)
    L      = L_GRPO + eta E_x[L_AF,x]

(the published forecast predicts a chunk a_{t:t+K} under a forecasting instruction; here K = 1
under the acting prompt, so a forecast is the next action itself). A game without a success adds
nothing; a game that always succeeds still trains through L_AF, where GRPO's advantages are 0.

The trainer's loss is (1/M) times a sum over its M samples, and L_GRPO is a mean over the N X
episodes of the update's X games; with each forecast token weighted

    w_x = eta N / max(1, |S_x|)

in a cross-entropy sum over a successful episode's action tokens (``losses.value_cross_entropy``),
that sum is N X (L_GRPO + eta E_x[L_AF,x]).
"""

from __future__ import annotations


def forecast_weight(successes: int, episodes_per_game: int, eta: float) -> float:
    """w_x = eta N / max(1, |S_x|): the per-token cross-entropy weight of a success of game x."""
    if successes < 0 or episodes_per_game < 1:
        raise ValueError(f"successes must be >= 0 and episodes per game >= 1 (got {successes}, {episodes_per_game})")
    return eta * episodes_per_game / max(1, successes)

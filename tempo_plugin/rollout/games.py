"""Which games a run plays: training games per seed, and held-out evaluation games.

Both runtimes draw games from here, so a slime run and an embedded run with the same seed train on
the same games and are evaluated on the same held-out set.
"""

from __future__ import annotations

EVAL_GAME_OFFSET = 2_000_000_000  # held-out games: never reached by training seeds
TRAIN_GAMES_PER_SEED = 10_000_019


def train_game(seed: int, cursor: int) -> int:
    """The ``cursor``-th training game of a run with this seed."""
    return seed * TRAIN_GAMES_PER_SEED + cursor


def eval_games(count: int) -> list[int]:
    """The first ``count`` held-out games (the same for every seed)."""
    return [EVAL_GAME_OFFSET + i for i in range(count)]

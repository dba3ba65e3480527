"""Which games a run plays (training games per seed, held-out evaluation games), and the seeds of
its sampling calls.

Both runtimes draw games from here, so a slime run and an embedded run with the same seed train on
the same games and are evaluated on the same held-out set.
"""

from __future__ import annotations

EVAL_GAME_OFFSET = 2_000_000_000  # held-out games: never reached by training seeds
TRAIN_GAMES_PER_SEED = 10_000_019


def train_game(seed: int, cursor: int, pool: int = 0) -> int:
    """The ``cursor``-th training game of a run with this seed; with a ``pool`` of P > 0 games
    (--train-games) the run cycles through its first P."""
    return seed * TRAIN_GAMES_PER_SEED + (cursor % pool if pool else cursor)


def train_pool(seed: int, pool: int) -> list[int]:
    """The ``pool`` training games a run with --train-games revisits."""
    return [train_game(seed, i) for i in range(pool)]


def eval_games(count: int) -> list[int]:
    """The first ``count`` held-out games (the same for every seed)."""
    return [EVAL_GAME_OFFSET + i for i in range(count)]


ROLLOUT, WARMUP_CRITIC, ENDPOINT_CRITIC, START_CRITIC, AUDIT, AUDIT_CRITIC, GAME_DRAW = 0, 7, 11, 13, 17, 19, 23
"""Sampling streams of one update: the actor's rollouts, the three kinds of critic calls, the
audit branches (``--audit-weight``), the critic calls on the states they pass (``--audit-boundaries``)
and SPO's prioritised draw of games."""


def sampling_seed(run_seed: int, update: int, stream: int = ROLLOUT) -> int:
    """The sampler seed of one call: runs with different ``--seed`` draw different noise."""
    return (run_seed * TRAIN_GAMES_PER_SEED + update) * 31 + stream


MC_REFRESH_OFFSET = 10_000
"""A Monte-Carlo refresh after TD update u samples as update u + this would: streams of its own."""


SEED_STRIDE = 1_000_003  # a prime: sub-seeds of different seeds do not collide for indices below it
REQUEST_SEED_MODULUS = 2**31 - 1  # per-request seeds stay in a 32-bit signed int, whatever the server does with them


def sub_seed(seed: int, index: int) -> int:
    """The ``index``-th seed derived from ``seed`` (a round of a rollout, a chunk of states, ...)."""
    return seed * SEED_STRIDE + index


def request_seed(call_seed: int, index: int) -> int:
    """The seed of the ``index``-th request of a sampler call whose seed is ``call_seed``, for servers
    that seed each request (SGLang's ``sampling_params.sampling_seed``): the N branches of one start
    state send the same prompt, so each needs its own seed or they would sample the same tokens."""
    return sub_seed(call_seed, index) % REQUEST_SEED_MODULUS

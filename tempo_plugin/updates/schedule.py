"""Which phase a multi-turn update is, and the update that runs it: one schedule for both drivers.

TEMPO: updates 0 .. W-1 are the critic's warm-up (W = --warmup-updates), then TD updates; with
--mc-refresh-every M the embedded driver follows every M-th TD update with a Monte-Carlo refresh
(``updates.tempo.mc_refresh_due``). Multi-turn GRPO and Temporal GRPO: every update is an episode
update of S fresh games (phase = the estimator's name).
"""

from __future__ import annotations

from typing import Callable

from tempo_plugin.estimators import ESTIMATORS, GENERATIVE
from tempo_plugin.updates.play import UpdateBatch
from tempo_plugin.updates.rollout import TempoRollout
from tempo_plugin.updates.tempo import start_states
from tempo_plugin.states.store import StateStore

WARMUP = "warmup"
TD = "td"


def phase(estimator: str, warmup_updates: int, update: int) -> str:
    """The phase of update ``update`` of a multi-turn ``estimator``: warmup or td (TEMPO), else the
    estimator's own name (grpo, temporal_grpo)."""
    if ESTIMATORS[estimator].critic != GENERATIVE:
        return estimator
    return WARMUP if update < warmup_updates else TD


def run_update(rollout: TempoRollout, phase_name: str, update: int, next_game: Callable[[], int],
               store: StateStore, max_warmup_states: int | None = None) -> UpdateBatch:
    """One update of ``phase_name``; games come from ``next_game``, TD start states from ``store``
    (the caller adds the batch's new states to it). ``max_warmup_states`` caps the states a warm-up
    values (slime: S, its rollout's sample count)."""
    cfg = rollout.cfg
    if phase_name == WARMUP:
        games = [next_game() for _ in range(cfg.warmup_games_per_batch)]
        return rollout.warmup_update(update, games, max_states=max_warmup_states)
    if phase_name == TD:
        return rollout.td_update(update, start_states(store, cfg), next_game)
    estimator = ESTIMATORS[phase_name]
    if estimator.tracker:  # SPO picks its games by the trackers' priorities
        return rollout.episode_update(update, rollout.prioritised_games(update))
    games = [next_game() for _ in range(cfg.states_per_batch)]
    if estimator.hindsight:
        return rollout.hindsight_update(update, games)
    return rollout.stage_update(update, games) if estimator.stages else rollout.episode_update(update, games)

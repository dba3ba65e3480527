"""Playing games on one sampler and environment pool: fresh states, restored groups of branches,
complete episodes, held-out success. The base every update of ``updates/`` builds on."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tempo_plugin.algorithms.stats import mean
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.envs.base import MILESTONES_HINT, Env, has_stages
from tempo_plugin.envs.pool import EnvPool
from tempo_plugin.updates.prefix_is import check_prefix_scoring
from tempo_plugin.rollout.engine import ENV_ERROR, Branch, RolloutLimits, fresh_state, run_branches
from tempo_plugin.rollout.games import sampling_seed, sub_seed
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.sampler import Sampler, SamplingParams
from tempo_plugin.rollout.samples import TrainSample
from tempo_plugin.states.restore import RestoreError, restore_env
from tempo_plugin.states.state import MacroState


@dataclass
class UpdateBatch:
    samples: list[TrainSample]
    metrics: dict[str, float]
    new_states: list[MacroState] = field(default_factory=list)
    start_depths: list[int] = field(default_factory=list)  # macro index of each TD start state
    value_pairs: list[tuple[float, float]] = field(default_factory=list)  # (critic's mean estimate, value target) per valued state



@dataclass
class Play:
    """One run's sampler, chat protocol and environment pool, and what every update does with them."""

    cfg: TempoConfig
    sampler: Sampler
    protocol: ChatProtocol
    make_env: Callable[[], Env]
    critic_sampler: Sampler | None = None  # the generative critic's model (--critic-weights separate); None: ``sampler``
    hindsight_sampler: Sampler | None = None  # LVRL's frozen valuer (updates/hindsight.py); None: no hindsight values

    def __post_init__(self) -> None:
        if self.critic_sampler is None:
            self.critic_sampler = self.sampler
        self.envs = EnvPool(self.make_env)  # every branch of the run reuses these (envs/pool.py)
        check_prefix_scoring(self.cfg, self.sampler)

    @property
    def params(self) -> SamplingParams:
        return SamplingParams(self.cfg.temperature, self.cfg.top_p, self.protocol.stop_token_ids)

    def _limits(self, horizon: int) -> RolloutLimits:
        return RolloutLimits(
            horizon=horizon,
            max_episode_steps=self.cfg.max_episode_steps,
            max_trajectory_tokens=self.cfg.max_trajectory_tokens,
            max_assistant_tokens=self.cfg.max_assistant_tokens,
            state_every=self.cfg.macro_rounds,
        )

    def _fresh_state(self, game: int) -> MacroState:
        env = self.envs.acquire(game)
        state = fresh_state(env, game, self.protocol)
        self.envs.release(env, game)
        if state.milestones_left is None and self.cfg.critic_calibration == "levels":
            raise ConfigError(f"--critic-calibration levels: --env {self.cfg.env} reports no milestones "
                              f"(stage_count, stages_completed); use platt or {MILESTONES_HINT}")
        return state

    def _restore_group(self, state: MacroState, group: int, count: int | None = None) -> list[Branch]:
        """``count`` (default N = --branches) pooled environments restored to ``state``, one branch
        each; on a RestoreError the group's environments go back to the pool."""
        branches: list[Branch] = []
        for _ in range(self.cfg.branches if count is None else count):
            env = self.envs.acquire(state.env_seed)
            try:
                restore_env(env, state, self.cfg.restore)
            except RestoreError:
                self._release(branches)
                self.envs.release(env, state.env_seed)
                raise
            branches.append(Branch.from_state(state, env, group))
        return branches

    def _release(self, branches: Sequence[Branch]) -> None:
        """Give the branches' environments back to the pool, except those that raised."""
        for branch in branches:
            if branch.stop_reason != ENV_ERROR:
                self.envs.release(branch.env, branch.start.env_seed)

    def play_episodes(self, games: Sequence[int], seed: int, episodes_per_game: int = 1, stages: bool = False) -> list[Branch]:
        """Complete episodes from fresh games; the episodes of game i form group i. ``stages``
        records the environment's milestones after every round."""
        branches = [
            b for group, game in enumerate(games)
            for b in self._restore_group(self._fresh_state(game), group, episodes_per_game)
        ]
        if stages:
            for branch in branches:
                if not has_stages(branch.env):
                    raise ConfigError(f"--env {self.cfg.env} reports no milestones (stage_count, stages_completed), "
                                      f"which Temporal GRPO needs: {MILESTONES_HINT}")
                branch.stage_count = branch.env.stage_count
        limits = dataclasses.replace(self._limits(self.cfg.max_episode_steps), stages=stages)
        run_branches(branches, self.sampler, self.protocol, self.params, limits, seed)
        self._release(branches)
        return branches

    def play_groups(self, games: Sequence[int], update: int, stages: bool = False) -> tuple[list[Branch], int, float]:
        """An update's N = --branches complete episodes of each game: (the episodes of the games whose
        environment never raised, the episodes that hit an environment error, seconds taken). A
        raising environment drops its game's whole group."""
        tic = time.perf_counter()
        branches = self.play_episodes(games, seed=sampling_seed(self.cfg.seed, update),
                                      episodes_per_game=self.cfg.branches, stages=stages)
        seconds = time.perf_counter() - tic
        broken = {b.group for b in branches if b.stop_reason == ENV_ERROR}
        env_errors = sum(b.stop_reason == ENV_ERROR for b in branches)
        return [b for b in branches if b.group not in broken], env_errors, seconds

    def success_rate(self, games: Sequence[int], seed: int) -> float:
        """Fraction of complete episodes won, one episode per game. Games that fit one sampler
        call's rows play together, as a rollout's branches do. More than that (a sampler with
        ``rows_per_call``: the local one) play in waves that one call takes whole even at the
        longest trajectory, so every round extends the cache the round before kept: an episode
        costs time linear in its length. A call split into chunks keeps no cache, and each round
        would prefill every game's whole context again (quadratic). One wave plays with ``seed``;
        several, wave w with ``sub_seed(seed, w)``."""
        rows_per_call = getattr(self.sampler, "rows_per_call", None)
        size = len(games)
        if rows_per_call is not None and len(games) > rows_per_call(1):
            size = rows_per_call(self.cfg.max_trajectory_tokens)
        waves = [list(games[start: start + size]) for start in range(0, len(games), max(1, size))]
        won: list[float] = []
        for index, wave in enumerate(waves):
            wave_seed = seed if len(waves) == 1 else sub_seed(seed, index)
            won += [float(b.won) for b in self.play_episodes(wave, wave_seed)]
        return mean(won)


def rollout_metrics(rounds: Sequence) -> dict[str, float]:
    return {
        "rollout/valid_action_rate": mean([float(r.parsed) for r in rounds]),
        "rollout/admissible_action_rate": mean([float(r.admissible) for r in rounds]),
        "rollout/rounds": float(len(rounds)),
    }

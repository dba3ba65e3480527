"""One TEMPO update as data, shared by both runtimes.

Warm-up update (critic only): complete episodes (H := T) from fresh games; boundary states at
rounds H, 2H, ... get K critic samples each, trained towards the Monte-Carlo outcome G = 1[won];
each game's round-0 state too, towards the mean outcome of its N episodes (``--warmup-start-states
false``: boundary states only, as the method does: its TD batches never start there after the first
update).

TD update (actor + critic): start states from the store (``start_states``: all but a
``--fresh-share`` of the batch, each stored state used at most ``--max-state-uses`` times) topped
up with fresh games; each restored (a mismatch drops the state, counts it and takes a fresh game
instead); N branches x <= H rounds; K critic samples at every start state and ``endpoint_samples``
at every non-terminal endpoint; signals from ``algorithms.tempo``; non-terminal endpoints become
new store states.

Monte-Carlo refresh (``mc_refresh_due``; embedded runtime): after every ``--mc-refresh-every`` TD
updates, one more warm-up update (critic only, complete episodes of fresh games, the current policy).

Episode update (multi-turn GRPO, the baseline): N complete episodes of each game through the same
engine; every action of an episode gets the group-relative advantage of its return (less
``--invalid-action-penalty`` per action the environment did not accept, as in TEMPO's actor).

A runtime supplies the Sampler and applies the returned training samples.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

from tempo_plugin.algorithms.grpo import grpo_advantages
from tempo_plugin.algorithms.stats import mean, pearson, population_std
from tempo_plugin.algorithms.tempo import (
    ADVANTAGE_EPSILON,
    CriticSignals,
    actor_signals,
    batch_normalised,
    critic_scale,
    critic_signals,
)
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.critic import aggregate_values, critic_messages, parse_value, reference_critic_messages
from tempo_plugin.envs.base import MILESTONES_HINT, Env, has_stages
from tempo_plugin.envs.pool import EnvPool
from tempo_plugin.rollout.engine import ENV_ERROR, MACRO_BOUNDARY, Branch, RolloutLimits, fresh_state, run_branches
from tempo_plugin.rollout.games import ENDPOINT_CRITIC, START_CRITIC, WARMUP_CRITIC, sampling_seed
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.sampler import Completion, Request, Sampler, SamplingParams
from tempo_plugin.rollout.samples import ACTOR, CRITIC, TrainSample, make_sample
from tempo_plugin.states.restore import RestoreError, restore_env
from tempo_plugin.states.state import MacroState
from tempo_plugin.states.store import StateStore

RESTORE_ATTEMPTS_PER_STATE = 4  # a TD batch gives up after S x this many failed restores


@dataclass
class UpdateBatch:
    samples: list[TrainSample]
    metrics: dict[str, float]
    new_states: list[MacroState] = field(default_factory=list)
    start_depths: list[int] = field(default_factory=list)  # macro index of each TD start state
    value_pairs: list[tuple[float, float]] = field(default_factory=list)  # (critic's mean estimate, value target) per valued state


def start_states(store: StateStore, cfg: TempoConfig) -> list[MacroState]:
    """The stored start states of one TD update: S - ceil(fresh_share x S) of them (fewer while the
    store is small); ``td_update`` fills the rest of the batch with fresh games (round 0). Each
    stored state leaves the store once it has started ``max_state_uses`` macro-steps.

    The reference tops up with fresh games only while the store holds fewer than S states, so after
    the first TD update no round-0 state is trained again; the fresh share keeps every depth of
    the episode in the start distribution.
    """
    fresh = math.ceil(round(cfg.fresh_share * cfg.states_per_batch, 9))  # 0.28 x 25 is 7, not 7.000000000000001
    return store.sample(cfg.states_per_batch - fresh, cfg.max_state_uses)


def mc_refresh_due(cfg: TempoConfig, update: int) -> bool:
    """Whether update ``update`` (a TD update) is followed by a Monte-Carlo refresh of the critic:
    after every ``--mc-refresh-every`` TD updates (the M-th, 2M-th, ... TD update).

    The critic's TD targets are built from its own values at the endpoints, so a critic that is off
    is trained towards targets that are off too, and a state whose target is exact (a branch that
    ends the game) comes up only where the store happens to hold it. The refresh plays fresh games
    to the end with the current policy and trains the critic on their boundary states towards the
    outcome (``TempoRollout.warmup_update``): unbiased targets for the current policy, at every depth.
    """
    every = cfg.mc_refresh_every
    return every > 0 and update >= cfg.warmup_updates and (update - cfg.warmup_updates + 1) % every == 0


@dataclass(frozen=True)
class CriticCall:
    """K critic samples at one state; ``completions`` is empty when the prompt was too long."""

    prompt_ids: list[int]
    completions: list[Completion]

    @cached_property
    def values(self) -> list[float | None]:
        return [parse_value(c.text) for c in self.completions]


@dataclass
class TempoRollout:
    cfg: TempoConfig
    sampler: Sampler
    protocol: ChatProtocol
    make_env: Callable[[], Env]

    def __post_init__(self) -> None:
        self.envs = EnvPool(self.make_env)  # every branch of the run reuses these (envs/pool.py)
        if self.cfg.prefix_is_clip > 0 and not callable(getattr(self.sampler, "prompt_logprobs", None)):
            raise ConfigError(f"--prefix-is-clip needs a sampler that scores prompts (prompt_logprobs); "
                              f"{type(self.sampler).__name__} does not: pass --prefix-is-clip 0")

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

    # -- critic -----------------------------------------------------------------------------------

    def critic_prompt(self, state: MacroState) -> list[int]:
        if self.cfg.critic_prompt == "reference":
            return self.protocol.render_prompt(reference_critic_messages(state.task, state.privileged_info, state.messages))
        messages = critic_messages(
            task=state.task,
            privileged_info=state.privileged_info,
            actions=state.action_history,
            observation=state.observation,
            round_index=state.round_index,
            max_rounds=self.cfg.max_episode_steps,
        )
        return self.protocol.render_prompt(messages)

    def call_critic(self, states: Sequence[MacroState], samples: int, seed: int) -> list[CriticCall]:
        """``samples`` critic completions per state, all in one sampler call."""
        prompts = [self.critic_prompt(s) for s in states]
        budget = self.cfg.max_trajectory_tokens - self.cfg.critic_max_tokens
        requests = [
            Request(p, self.cfg.critic_max_tokens) for p in prompts if len(p) <= budget for _ in range(samples)
        ]
        completions = iter(self.sampler.generate(requests, self.params, seed=seed) if requests else [])
        return [
            CriticCall(p, [next(completions) for _ in range(samples)] if len(p) <= budget else [])
            for p in prompts
        ]

    def critic_signals(self, call: CriticCall, target: float) -> CriticSignals:
        """The K critic signals (errors, rewards, advantages) of one state valued towards ``target``."""
        return critic_signals(call.values, target, self.cfg.r_max, self.cfg.critic_reward)

    def critic_samples(self, call: CriticCall, signals: CriticSignals, group: int, scale: float = 1.0) -> list[TrainSample]:
        """Critic training samples for one state (none if degenerate), advantage ``scale`` x A_k; a
        sample whose A_k is 0 is left out."""
        samples = []
        if not signals.degenerate:
            for completion, advantage, reward in zip(call.completions, signals.advantages, signals.rewards):
                if abs(advantage) <= ADVANTAGE_EPSILON:
                    continue
                tokens = call.prompt_ids + completion.token_ids
                mask = [0] * len(call.prompt_ids) + [1] * len(completion.token_ids)
                logprobs = [0.0] * len(call.prompt_ids) + list(completion.logprobs)
                samples.append(make_sample(tokens, mask, logprobs, advantage * scale, CRITIC, group, reward))
        return samples

    @staticmethod
    def value_pairs(calls: Sequence[CriticCall], targets: Sequence[float | None]) -> list[tuple[float, float]]:
        """(mean parsed estimate, target) of each state that has a target and a parsed critic value;
        ``targets[i]`` is call i's value target, None where it has none (a dropped TD group)."""
        return [(mean([v for v in c.values if v is not None]), t) for c, t in zip(calls, targets, strict=True)
                if t is not None and any(v is not None for v in c.values)]

    @staticmethod
    def _critic_metrics(calls: Sequence[CriticCall], targets: Sequence[float | None],
                        answered: Sequence[tuple[float, float]]) -> dict[str, float]:
        """``answered``: ``value_pairs(calls, targets)``."""
        values = [v for c in calls for v in c.values]
        answered_calls = [c for c in calls if c.completions]
        parsed = {v for v in values if v is not None}
        metrics = {
            "critic/parse_failure_rate": mean([float(v is None) for v in values]),
            # K identical completions: every critic advantage of the group is 0, whatever the error
            "critic/identical_group_rate": mean([float(len({x.text for x in c.completions}) == 1) for c in answered_calls]),
            "critic/distinct_values": float(len(parsed)),
            "critic/prompt_too_long_rate": mean([float(not c.completions) for c in calls]),
            "critic/mean_estimate_mean": mean([a for a, _ in answered]),
            "critic/value_target_mean": mean([t for t in targets if t is not None]),
        }
        corr = pearson([a for a, _ in answered], [t for _, t in answered])
        if corr is not None:
            metrics["critic/value_corr"] = corr
        return metrics

    # -- warm-up ----------------------------------------------------------------------------------

    def warmup_update(self, update: int, games: Sequence[int], max_states: int | None = None) -> UpdateBatch:
        """``max_states`` caps the boundary states valued (a uniform subset, fixed by ``update``)."""
        cfg = self.cfg
        tic = time.perf_counter()
        branches = [
            b for group, game in enumerate(games)
            for b in self._restore_group(self._fresh_state(game), group)
        ]
        env_seconds = run_branches(
            branches, self.sampler, self.protocol, self.params, self._limits(cfg.max_episode_steps),
            seed=sampling_seed(cfg.seed, update)
        )
        self._release(branches)
        rollout_seconds = time.perf_counter() - tic

        # Each game's round-0 state, with the mean outcome of its N episodes as target: TD batches
        # start a --fresh-share of their states there, so the critic must value it too.
        boundaries: list[MacroState] = []
        targets: list[float] = []
        healthy = [b for b in branches if b.stop_reason != ENV_ERROR]  # a raising environment: episode dropped
        for group in range(len(games) if cfg.warmup_start_states else 0):
            episodes = [b for b in healthy if b.group == group]
            if episodes:
                boundaries.append(episodes[0].start)
                targets.append(mean([float(b.won) for b in episodes]))
        for branch in healthy:
            for k in range(cfg.macro_rounds, len(branch.rounds), cfg.macro_rounds):
                boundaries.append(branch.state_after(k, k // cfg.macro_rounds, update))
                targets.append(1.0 if branch.won else 0.0)
        available = len(boundaries)
        if max_states is not None and available > max_states:
            keep = sorted(random.Random(update).sample(range(available), max_states))
            boundaries = [boundaries[i] for i in keep]
            targets = [targets[i] for i in keep]
        tic = time.perf_counter()
        calls = self.call_critic(boundaries, cfg.critic_samples, seed=sampling_seed(cfg.seed, update, WARMUP_CRITIC))
        critic_seconds = time.perf_counter() - tic

        samples: list[TrainSample] = []
        errors: list[float] = []
        for group, (call, target) in enumerate(zip(calls, targets)):
            if not call.completions:
                continue
            signals = self.critic_signals(call, target)
            samples += self.critic_samples(call, signals, group)
            errors += signals.errors
        pairs = self.value_pairs(calls, targets)
        rounds = [r for b in branches for r in b.rounds]
        metrics = {
            "warmup/success_rate": mean([float(b.won) for b in branches]),
            "warmup/steps_mean": mean([float(len(b.rounds)) for b in branches]),
            "warmup/boundary_states": float(len(boundaries)),
            "warmup/boundary_states_available": float(available),
            "rollout/env_errors": float(len(branches) - len(healthy)),
            "target/mc_return_mean": mean(targets),
            "critic/abs_error_mean": mean(errors),
            **self._critic_metrics(calls, targets, pairs),
            **rollout_metrics(rounds),
            "train/critic_samples": float(len(samples)),
            "train/actor_samples": 0.0,
            "time/rollout": rollout_seconds,
            "time/critic": critic_seconds,
            "time/env": env_seconds,
        }
        return UpdateBatch(samples=samples, metrics=metrics, value_pairs=pairs)

    # -- TD -----------------------------------------------------------------------------------------

    def _fresh_state(self, game: int) -> MacroState:
        env = self.envs.acquire(game)
        state = fresh_state(env, game, self.protocol)
        self.envs.release(env, game)
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

    def prefix_weights(self, update: int, states: Sequence[MacroState]) -> tuple[list[float], dict[str, float]]:
        """The prefix importance weight of each start state (``algorithms.importance``) and the is/*
        metrics; all 1 (and no metrics) without --prefix-is-clip.

        A stored state's prefix holds assistant tokens sampled by earlier policies: L_old(s) is the
        sum of their sampler log-probs, saved with the state; L_cur(s) the same tokens' log-probs
        under the sampler's current policy (one prefill per state, ``prompt_logprobs``). Then
        w~ = min(exp(L_cur - L_old), C), zeroed for states more than --prefix-is-max-staleness
        updates old, optionally divided by the batch mean. A fresh game has no assistant tokens: w = 1.
        """
        cfg = self.cfg
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
        rows = self.sampler.prompt_logprobs([list(states[i].token_prefix) for i in scored], cfg.temperature)
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

    def td_update(self, update: int, starts: Sequence[MacroState], next_game: Callable[[], int]) -> UpdateBatch:
        """``starts`` come from the store; the batch is topped up to states_per_batch with fresh games."""
        cfg = self.cfg
        tic = time.perf_counter()
        groups: list[list[Branch]] = []
        restore_failures = 0
        fresh = 0
        pending = list(starts)
        while len(groups) < cfg.states_per_batch:
            if restore_failures >= RESTORE_ATTEMPTS_PER_STATE * cfg.states_per_batch:
                raise RuntimeError(
                    f"TD update {update}: {restore_failures} restores failed while filling {cfg.states_per_batch} "
                    f"start states; the environment ({cfg.env}) does not reproduce its saved states (try --restore replay)"
                )
            is_fresh = not pending
            state = pending.pop(0) if pending else self._fresh_state(next_game())
            try:
                groups.append(self._restore_group(state, len(groups)))
            except RestoreError:
                restore_failures += 1
                continue
            fresh += is_fresh
        branches = [b for g in groups for b in g]
        env_seconds = run_branches(
            branches, self.sampler, self.protocol, self.params, self._limits(cfg.macro_rounds),
            seed=sampling_seed(cfg.seed, update)
        )
        self._release(branches)
        rollout_seconds = time.perf_counter() - tic

        tic = time.perf_counter()
        endpoints = [b for b in branches if b.stop_reason == MACRO_BOUNDARY]
        endpoint_states = [b.state_after(len(b.rounds), b.start.macro_index + 1, update) for b in endpoints]
        start_states = [g[0].start for g in groups]
        endpoint_calls = self.call_critic(endpoint_states, cfg.endpoint_samples, seed=sampling_seed(cfg.seed, update, ENDPOINT_CRITIC))
        start_calls = self.call_critic(start_states, cfg.critic_samples, seed=sampling_seed(cfg.seed, update, START_CRITIC))
        critic_seconds = time.perf_counter() - tic
        # An endpoint none of whose critic samples parsed (or whose prompt is too long) has no value:
        # --unvalued-endpoint drop leaves its branch out, zero values it 0 (the method). A branch whose
        # environment raised is always left out; a group needs 2 branches left.
        valued = [any(v is not None for v in c.values) for c in endpoint_calls]
        unvalued = valued.count(False)
        endpoint_value = {id(b): aggregate_values(c.values) for b, c, ok in zip(endpoints, endpoint_calls, valued)
                          if ok or cfg.unvalued_endpoint == "zero"}
        env_errors = sum(b.stop_reason == ENV_ERROR for b in branches)

        samples: list[TrainSample] = []
        errors: list[float] = []
        targets: list[float | None] = [None] * len(groups)  # per group, aligned with start_calls; None: dropped
        degenerate = []
        value_gaps = []
        dropped_groups = 0
        actor: list[tuple[Branch, float, float, int]] = []  # (branch, A_n, R_n, group) of the kept groups
        critic: list[tuple[CriticCall, CriticSignals, int]] = []  # each kept group's start-state critic call
        weights, is_metrics = self.prefix_weights(update, start_states)
        for group, (full_group, start_call) in enumerate(zip(groups, start_calls)):
            branch_group = [b for b in full_group if b.stop_reason != ENV_ERROR
                            and (b.stop_reason != MACRO_BOUNDARY or id(b) in endpoint_value)]
            if len(branch_group) < 2:
                dropped_groups += 1
                continue
            signals = actor_signals(
                [b.segment_reward for b in branch_group],
                [endpoint_value.get(id(b), 0.0) for b in branch_group],
                [b.terminal for b in branch_group],
                [cfg.invalid_action_penalty * b.unaccepted_actions for b in branch_group],
            )
            targets[group] = signals.value_target
            degenerate.append(float(signals.degenerate))
            value_gaps.append(signals.zero_reward_value_std)
            actor += [(branch, advantage, ret, group) for branch, advantage, ret
                      in zip(branch_group, signals.advantages, signals.returns)]
            if start_call.completions:
                critic.append((start_call, self.critic_signals(start_call, signals.value_target), group))
        critic_sigma = population_std([a for _, c, _ in critic for a in c.advantages])
        scale = critic_scale(critic_sigma, cfg.critic_advantage_std)
        for call, critic_group, group in critic:
            samples += self.critic_samples(call, critic_group, group, scale)
            errors += critic_group.errors
        raw = [advantage for _, advantage, _, _ in actor]
        scaled = batch_normalised(raw) if cfg.normalise_advantages else raw
        for (branch, _, ret, group), advantage in zip(actor, scaled):
            advantage *= weights[group]  # w~(s) (R_n - G(s)); 1 for a fresh game or without --prefix-is-clip
            if abs(advantage) > ADVANTAGE_EPSILON:
                samples.append(make_sample(branch.tokens, branch.loss_mask, branch.logprobs, advantage, ACTOR, group, ret))

        new_states = [
            s for s in endpoint_states
            if s.round_index < cfg.max_episode_steps and len(s.token_prefix) < cfg.max_trajectory_tokens
        ]
        endpoint_values = [v for c in endpoint_calls for v in c.values]
        pairs = self.value_pairs(start_calls, targets)
        rounds = [r for b in branches for r in b.rounds]
        metrics = {
            "td/fresh_states": float(fresh),
            "td/dropped_groups": float(dropped_groups),
            "rollout/env_errors": float(env_errors),
            "critic/endpoint_unvalued": float(unvalued),
            "td/restore_failures": float(restore_failures),
            "td/new_endpoints": float(len(new_states)),
            "td/macro_index_mean": mean([float(s.macro_index) for s in start_states]),
            "td/start_round_mean": mean([float(s.round_index) for s in start_states]),
            "actor/segment_reward_mean": mean([b.segment_reward for b in branches]),
            "actor/macro_boundary_rate": mean([float(not b.terminal) for b in branches]),
            "actor/degenerate_group_rate": mean(degenerate),
            "actor/value_target_mean": mean([t for t in targets if t is not None]),
            "actor/value_gap_zero_reward": mean(value_gaps),
            "actor/advantage_std": population_std(raw),
            "critic/advantage_std": critic_sigma,
            "critic/abs_error_mean": mean(errors),
            **self._critic_metrics(start_calls, targets, pairs),
            "critic/endpoint_value_mean": mean(list(endpoint_value.values())),
            "critic/endpoint_parse_failures": float(sum(v is None for v in endpoint_values)),
            **is_metrics,
            **rollout_metrics(rounds),
            "train/actor_samples": float(sum(s.role == ACTOR for s in samples)),
            "train/critic_samples": float(sum(s.role == CRITIC for s in samples)),
            "time/rollout": rollout_seconds,
            "time/critic": critic_seconds,
            "time/env": env_seconds,
        }
        return UpdateBatch(samples=samples, metrics=metrics, new_states=new_states,
                           start_depths=[s.macro_index for s in start_states],
                           value_pairs=pairs)

    # -- multi-turn GRPO (the baseline) ---------------------------------------------------------------

    def episode_update(self, update: int, games: Sequence[int]) -> UpdateBatch:
        """N = --branches complete episodes of each game; A_i = (R'_i - mean) / (std + eps) over the
        game's episodes (``algorithms.grpo``), R'_i = R_i - c u_i the episode return less the
        invalid-action penalty, on every action of episode i."""
        cfg = self.cfg
        tic = time.perf_counter()
        branches = self.play_episodes(games, seed=sampling_seed(cfg.seed, update), episodes_per_game=cfg.branches)
        rollout_seconds = time.perf_counter() - tic
        broken = {b.group for b in branches if b.stop_reason == ENV_ERROR}  # a raising environment drops its game's group
        env_errors = sum(b.stop_reason == ENV_ERROR for b in branches)
        branches = [b for b in branches if b.group not in broken]
        returns = [b.segment_reward for b in branches]
        advantages = grpo_advantages([shaped_episode_return(b, cfg.invalid_action_penalty) for b in branches], cfg.branches)
        samples = [
            make_sample(b.tokens, b.loss_mask, b.logprobs, a, ACTOR, b.group, ret)
            for b, a, ret in zip(branches, advantages, returns) if abs(a) > ADVANTAGE_EPSILON
        ]
        groups = [advantages[g * cfg.branches:(g + 1) * cfg.branches] for g in range(len(games) - len(broken))]
        metrics = {
            **episode_metrics(branches, env_errors),
            "actor/degenerate_group_rate": mean([float(all(abs(a) <= ADVANTAGE_EPSILON for a in g)) for g in groups]),
            "train/actor_samples": float(len(samples)),
            "train/critic_samples": 0.0,
            "time/rollout": rollout_seconds,
            "time/critic": 0.0,
        }
        return UpdateBatch(samples=samples, metrics=metrics)

    def stage_update(self, update: int, games: Sequence[int]) -> UpdateBatch:
        """Temporal GRPO (``algorithms.temporal_grpo``): N = --branches complete episodes of each game;
        the environment's milestones (``stages_completed`` after every round) give each episode i
        its stage outcomes R_ik and participation V_ik; A_ik = (R_ik - mu_k) / (sigma_k + eps) over
        the game's participants of stage k; each round gets the advantage of the stage it worked on,
        less c for a round whose action the environment did not accept (as in GRPO's R'_i)."""
        from tempo_plugin.algorithms.temporal_grpo import (  # torch: imported on use (see prefix_weights)
            participation_from_outcomes,
            round_advantages,
            stage_advantages,
            stage_of_rounds,
        )

        cfg = self.cfg
        tic = time.perf_counter()
        branches = self.play_episodes(games, seed=sampling_seed(cfg.seed, update), episodes_per_game=cfg.branches,
                                      stages=True)
        rollout_seconds = time.perf_counter() - tic
        broken = {b.group for b in branches if b.stop_reason == ENV_ERROR}
        env_errors = sum(b.stop_reason == ENV_ERROR for b in branches)
        branches = [b for b in branches if b.group not in broken]
        samples: list[TrainSample] = []
        degenerate: list[float] = []
        entered: list[float] = []
        for g in sorted({b.group for b in branches}):
            group = [b for b in branches if b.group == g]
            count = group[0].stage_count
            completions = [episode_stage_completions(b, count) for b in group]
            outcomes = [[int(c is not None) for c in row] for row in completions]
            participation = participation_from_outcomes(outcomes)
            table = stage_advantages(outcomes, participation)
            degenerate.append(float(bool((table.abs() <= ADVANTAGE_EPSILON).all())))
            entered.append(float(participation.sum()) / len(group))
            for branch, row, adv_row in zip(group, completions, table):
                per_round = round_advantages(stage_of_rounds(row, len(branch.rounds)), adv_row)
                per_round = [a - cfg.invalid_action_penalty * (not r.admissible) for a, r in zip(per_round, branch.rounds)]
                if any(abs(a) > ADVANTAGE_EPSILON for a in per_round):
                    samples.append(make_sample(branch.tokens, branch.loss_mask, branch.logprobs, per_round, ACTOR,
                                               branch.group, branch.segment_reward))
        metrics = {
            **episode_metrics(branches, env_errors),
            "actor/degenerate_group_rate": mean(degenerate),
            "stages/entered_mean": mean(entered),
            "stages/completed_mean": mean([float(b.rounds[-1].stages_completed or 0) for b in branches if b.rounds]),
            "train/actor_samples": float(len(samples)),
            "train/critic_samples": 0.0,
            "time/rollout": rollout_seconds,
            "time/critic": 0.0,
        }
        return UpdateBatch(samples=samples, metrics=metrics)

    # -- evaluation -----------------------------------------------------------------------------------

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

    def success_rate(self, games: Sequence[int], seed: int) -> float:
        """Fraction of complete episodes won, one episode per game."""
        return mean([float(b.won) for b in self.play_episodes(games, seed)])


def shaped_episode_return(branch: Branch, penalty: float) -> float:
    """R'_i = R_i - c u_i: an episode's return less the invalid-action penalty, what multi-turn GRPO
    centres on both runtimes."""
    return branch.segment_reward - penalty * branch.unaccepted_actions


def episode_stage_completions(branch: Branch, stage_count: int) -> list[int | None]:
    """For each of the ``stage_count`` milestones, the round whose action first reached it (None if
    never): milestones are cumulative, so stage k is reached when ``stages_completed`` > k."""
    completions: list[int | None] = [None] * stage_count
    for r, record in enumerate(branch.rounds):
        reached = record.stages_completed or 0
        for k in range(reached):
            if completions[k] is None:
                completions[k] = r
    return completions


def episode_metrics(branches: Sequence[Branch], env_errors: int) -> dict[str, float]:
    """What an update of complete episodes (multi-turn GRPO, Temporal GRPO) reports about its rollouts."""
    return {
        "rollout/success_rate": mean([float(b.won) for b in branches]),
        "rollout/env_errors": float(env_errors),
        "rollout/steps_mean": mean([float(len(b.rounds)) for b in branches]),
        **rollout_metrics([r for b in branches for r in b.rounds]),
    }


def rollout_metrics(rounds: Sequence) -> dict[str, float]:
    return {
        "rollout/valid_action_rate": mean([float(r.parsed) for r in rounds]),
        "rollout/admissible_action_rate": mean([float(r.admissible) for r in rounds]),
        "rollout/rounds": float(len(rounds)),
    }

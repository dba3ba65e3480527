"""TEMPO's updates as data, shared by both drivers (the embedded trainer and the slime hooks).

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

The TD update in its steps: fill S start groups (``_start_groups``), play N branches of <= H
rounds from each, value the endpoints (``_value_endpoints``) and the start states, turn each group
into actor and critic signals (``_group_signals``), then into training samples (``_critic_batch``,
``_actor_batch``). A driver supplies the Sampler and applies the returned training samples.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tempo_plugin.algorithms.stats import mean, population_std
from tempo_plugin.algorithms.tempo import (
    ADVANTAGE_EPSILON,
    BrierScores,
    Calibration,
    actor_signals,
    batch_normalised,
    brier_scores,
    critic_target,
    fit_calibration,
)
from tempo_plugin.config import TempoConfig
from tempo_plugin.critic import aggregate_values
from tempo_plugin.updates.critic_calls import CriticCall, CriticCalls
from tempo_plugin.updates.play import UpdateBatch, rollout_metrics
from tempo_plugin.updates.prefix_is import start_state_weights
from tempo_plugin.rollout.engine import ENV_ERROR, MACRO_BOUNDARY, Branch, run_branches
from tempo_plugin.rollout.games import (AUDIT, AUDIT_CRITIC, ENDPOINT_CRITIC, MC_REFRESH_OFFSET, START_CRITIC, WARMUP_CRITIC,
                                         sampling_seed)
from tempo_plugin.rollout.samples import ACTOR, CRITIC, VALUE, TrainSample, make_sample
from tempo_plugin.states.restore import RestoreError
from tempo_plugin.states.state import MacroState
from tempo_plugin.states.store import StateStore

RESTORE_ATTEMPTS_PER_STATE = 4  # a TD batch gives up after S x this many failed restores


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


AUDITS_KEPT = 64  # the readiness gate judges the critic on this many most recent audits ...
AUDITS_MIN = 16  # ... and only once it has this many


@dataclass(frozen=True)
class Gate:
    """The readiness gate of one TD update (``algorithms.tempo``: B_critic against B_const)."""

    ready: bool
    scores: BrierScores | None  # None: fewer than AUDITS_MIN audits so far
    fallback: float  # zbar: every non-terminal endpoint's value while the gate is closed


@dataclass
class AuditWindow:
    """The last AUDITS_KEPT audits of the critic: (estimate e_i, calibrated estimate, Monte-Carlo
    outcome z_i, milestones left L_i or None, TD update u_i or None), from TD audits, warm-up and
    refresh episodes. The calibrated estimate is the one the map of the audits before it gave
    (``algorithms.tempo``: prequential). A resumed run gets them back from its checkpoint
    (``Progress.audits``)."""

    rows: list[tuple[float, float, float, int | None, int | None]] = field(default_factory=list)

    def add(self, pairs: Sequence[tuple[float, float]], calibration: Calibration,
            levels: Sequence[int | None] | None = None, update: int | None = None) -> None:
        """(estimate, outcome) pairs at states with ``levels`` milestones left (None: unknown), played
        in TD update ``update``, each scored with ``calibration``, the map they were valued with."""
        levels = [None] * len(pairs) if levels is None else levels
        self.rows = (self.rows + [(float(e), calibration(float(e), lv), float(z), lv, update)
                                  for (e, z), lv in zip(pairs, levels, strict=True)])[-AUDITS_KEPT:]

    def restore(self, rows: Sequence[Sequence[float | None]]) -> None:
        """Rows saved by a checkpoint; one from before calibration saved (estimate, outcome), one
        from before levels (estimate, calibrated, outcome), one from before the drift no update."""
        def row(r: Sequence) -> tuple[float, float, float, int | None, int | None]:
            if len(r) == 2:
                return float(r[0]), float(r[0]), float(r[1]), None, None
            level = None if len(r) < 4 or r[3] is None else int(r[3])
            return float(r[0]), float(r[1]), float(r[2]), level, None if len(r) < 5 or r[4] is None else int(r[4])
        self.rows = [row(r) for r in rows][-AUDITS_KEPT:]

    def calibration(self, cfg: TempoConfig) -> Calibration:
        """--critic-calibration platt (levels): the map fitted on these audits (with their levels, and
        with --calibration-drift their ages u_i - u*) once there are AUDITS_MIN of them; the identity
        before, and with none. Rows without an update (from a checkpoint before the drift) fit no drift."""
        if cfg.critic_calibration == "none" or len(self.rows) < AUDITS_MIN:
            return Calibration()
        updates = [u for *_, u in self.rows]
        ages = None
        if cfg.calibration_drift and None not in updates:
            newest = max(updates)
            ages = [u - newest for u in updates]
        return fit_calibration([(e, z) for e, _, z, _, _ in self.rows],
                               levels=[lv for _, _, _, lv, _ in self.rows] if cfg.critic_calibration == "levels" else None,
                               ages=ages)

    def gate(self, cfg: TempoConfig) -> Gate:
        """Ready when --readiness-gate is off, or when the (calibrated) critic beats the constant
        guess on at least AUDITS_MIN recent audits."""
        scores = brier_scores([(c, z) for _, c, z, *_ in self.rows]) if len(self.rows) >= AUDITS_MIN else None
        base = scores.base_rate if scores else (mean([z for _, _, z, *_ in self.rows]) if self.rows else 0.0)
        ready = not cfg.readiness_gate or (scores is not None and scores.skill > 0)
        return Gate(ready, scores, base)


def audit_metrics(audits: dict[int, Branch], rounds: Sequence, gate: Gate | None,
                  calibration: Calibration) -> dict[str, float]:
    """The audits of one TD update, the readiness gate they were judged by and the calibration map
    the update valued its endpoints with."""
    metrics = {
        "audit/branches": float(len(audits)),
        "audit/rounds": float(len(rounds)),
        "audit/success_rate": mean([float(a.won) for a in audits.values()]),
        "critic/calibration_slope": calibration.a,
        "critic/calibration_intercept": calibration.b,
    }
    if calibration.levels:  # --critic-calibration levels: how far apart the map puts the levels, in logits
        intercepts = [c for _, c in calibration.levels]
        metrics["critic/calibration_level_range"] = max(intercepts) - min(intercepts)
    if calibration.drift:  # --calibration-drift: the fitted change of the outcomes' logit per TD update
        metrics["critic/calibration_drift"] = calibration.drift
    if gate is not None:
        metrics["critic/ready"] = float(gate.ready)
        if gate.scores is not None:
            metrics.update({"critic/audit_brier": gate.scores.critic, "critic/audit_brier_constant": gate.scores.constant,
                            "critic/audit_brier_skill": gate.scores.skill})
    return metrics


@dataclass
class TempoUpdates(CriticCalls):
    """TEMPO's two updates: the critic-only warm-up (also the Monte-Carlo refresh) and the TD update."""

    audits: AuditWindow = field(default_factory=AuditWindow)

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

        samples, errors, _, degenerate = self.critic_training(
            [(call, target, group) for group, (call, target) in enumerate(zip(calls, targets)) if call.answered])
        pairs = self.value_pairs(calls, targets)
        if cfg.audit_weight > 0:
            self.audits.add(pairs, self.audits.calibration(cfg),  # complete episodes: their outcomes audit the critic too
                            self.pair_levels(calls, targets, boundaries),
                            update % MC_REFRESH_OFFSET)  # a refresh runs as its TD update + the offset (own seeds)
        rounds = [r for b in branches for r in b.rounds]
        metrics = {
            "warmup/success_rate": mean([float(b.won) for b in branches]),
            "warmup/steps_mean": mean([float(len(b.rounds)) for b in branches]),
            "warmup/boundary_states": float(len(boundaries)),
            "warmup/boundary_states_available": float(available),
            "rollout/env_errors": float(len(branches) - len(healthy)),
            "target/mc_return_mean": mean(targets),
            "critic/abs_error_mean": mean(errors),
            "critic/degenerate_group_rate": mean(degenerate),
            **self._critic_metrics(calls, targets, pairs),
            **rollout_metrics(rounds),
            "train/critic_samples": float(len(samples)),
            "train/actor_samples": 0.0,
            "time/rollout": rollout_seconds,
            "time/critic": critic_seconds,
            "time/env": env_seconds,
        }
        return UpdateBatch(samples=samples, metrics=metrics, value_pairs=pairs)

    def td_update(self, update: int, starts: Sequence[MacroState], next_game: Callable[[], int]) -> UpdateBatch:
        """``starts`` come from the store; the batch is topped up to states_per_batch with fresh games."""
        cfg = self.cfg
        tic = time.perf_counter()
        groups, fresh, restore_failures = self._start_groups(update, starts, next_game)
        branches = [b for g in groups for b in g]
        env_seconds = run_branches(
            branches, self.sampler, self.protocol, self.params, self._limits(cfg.macro_rounds),
            seed=sampling_seed(cfg.seed, update)
        )
        self._release(branches)
        audits, audit_env_seconds = self._play_audits(update, groups)
        env_seconds += audit_env_seconds
        passed = self._audit_boundaries(update, audits) if cfg.audit_boundaries else []
        rollout_seconds = time.perf_counter() - tic

        tic = time.perf_counter()
        gate = self.audits.gate(cfg) if cfg.audit_weight > 0 else None  # from the audits before this update's
        calibration = self.audits.calibration(cfg)
        endpoints = self._value_endpoints(update, branches, None if gate is None or gate.ready else gate.fallback,
                                          calibration)
        start_states = [g[0].start for g in groups]
        start_calls = self.call_critic(start_states, cfg.critic_samples, seed=sampling_seed(cfg.seed, update, START_CRITIC))
        passed_calls = self.call_critic([s for s, _ in passed], cfg.critic_samples,
                                        seed=sampling_seed(cfg.seed, update, AUDIT_CRITIC)) if passed else []
        critic_seconds = time.perf_counter() - tic

        weights, is_metrics = start_state_weights(cfg, self.sampler, update, start_states)
        signals = self._group_signals(groups, start_calls, endpoints.values)
        outcomes = {g: float(a.won) for g, a in audits.items() if a.stop_reason != ENV_ERROR}
        targets = [None if t is None else critic_target(t, outcomes.get(g), cfg.audit_weight)
                   for g, t in enumerate(signals.targets)]  # G_crit per group (G(s) without audits)
        critic = [(call, targets[group], group) for call, _, group in signals.critic]
        critic += [(call, z, len(groups) + i) for i, (call, (_, z)) in enumerate(zip(passed_calls, passed))
                   if call.answered]  # the audits' boundary states, towards their audit's outcome
        critic_samples, errors, critic_sigma, degenerate = self.critic_training(critic, cfg.critic_advantage_std)
        actor_samples, raw = self._actor_batch(signals.actor, weights)
        samples = critic_samples + actor_samples
        audited = [outcomes.get(g) for g in range(len(start_calls))]
        self.audits.add(self.value_pairs(start_calls, audited) + self.value_pairs(passed_calls, [z for _, z in passed]),
                        calibration, self.pair_levels(start_calls, audited, start_states)
                        + self.pair_levels(passed_calls, [z for _, z in passed], [s for s, _ in passed]), update)

        new_states = [
            s for s in endpoints.states
            if s.round_index < cfg.max_episode_steps and len(s.token_prefix) < cfg.max_trajectory_tokens
        ]
        endpoint_values = [v for c in endpoints.calls for v in c.values]
        pairs = self.value_pairs(start_calls, targets)
        audit_rounds = [r for a in audits.values() for r in a.rounds]
        rounds = [r for b in branches for r in b.rounds] + audit_rounds  # audits count as environment steps
        metrics = {
            "td/fresh_states": float(fresh),
            "td/dropped_groups": float(signals.dropped_groups),
            "rollout/env_errors": float(sum(b.stop_reason == ENV_ERROR for b in branches)),
            "critic/endpoint_unvalued": float(endpoints.unvalued),
            "td/restore_failures": float(restore_failures),
            "td/new_endpoints": float(len(new_states)),
            "td/macro_index_mean": mean([float(s.macro_index) for s in start_states]),
            "td/start_round_mean": mean([float(s.round_index) for s in start_states]),
            "actor/segment_reward_mean": mean([b.segment_reward for b in branches]),
            "actor/macro_boundary_rate": mean([float(not b.terminal) for b in branches]),
            "actor/degenerate_group_rate": mean(signals.degenerate),
            "actor/value_target_mean": mean([t for t in signals.targets if t is not None]),
            "actor/value_gap_zero_reward": mean(signals.value_gaps),
            "actor/advantage_std": population_std(raw),
            "critic/advantage_std": critic_sigma,
            "critic/abs_error_mean": mean(errors),
            "critic/degenerate_group_rate": mean(degenerate),
            **self._critic_metrics(start_calls, targets, pairs),
            "critic/endpoint_value_mean": mean(list(endpoints.values.values())),
            "critic/endpoint_parse_failures": float(sum(v is None for v in endpoint_values)),
            **is_metrics,
            **(audit_metrics(audits, audit_rounds, gate, calibration) if cfg.audit_weight > 0 else {}),
            **({"audit/boundary_states": float(len(passed))} if cfg.audit_boundaries else {}),
            **rollout_metrics(rounds),
            "train/actor_samples": float(sum(s.role == ACTOR for s in samples)),
            "train/critic_samples": float(sum(s.role in (CRITIC, VALUE) for s in samples)),
            "time/rollout": rollout_seconds,
            "time/critic": critic_seconds,
            "time/env": env_seconds,
        }
        return UpdateBatch(samples=samples, metrics=metrics, new_states=new_states,
                           start_depths=[s.macro_index for s in start_states],
                           value_pairs=pairs)

    def _start_groups(self, update: int, starts: Sequence[MacroState],
                      next_game: Callable[[], int]) -> tuple[list[list[Branch]], int, int]:
        """S groups of N branches, each group restored to one start state: ``starts`` first, then
        fresh games. A state that does not restore is dropped and counted. Returns (groups, fresh
        games taken, failed restores)."""
        cfg = self.cfg
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
        return groups, fresh, restore_failures

    def _value_endpoints(self, update: int, branches: Sequence[Branch], fallback: float | None = None,
                         calibration: Calibration = Calibration()) -> "Endpoints":
        """The critic's value V(s_{t+H}) of each branch that stopped at its macro-step boundary,
        through ``calibration`` (--critic-calibration).

        An endpoint none of whose critic samples parsed (or whose prompt is too long) has no value:
        --unvalued-endpoint drop leaves its branch out, zero values it 0 (the method). With a
        ``fallback`` (the readiness gate is closed) every endpoint takes that value and the critic
        is not asked."""
        cfg = self.cfg
        endpoints = [b for b in branches if b.stop_reason == MACRO_BOUNDARY]
        states = [b.state_after(len(b.rounds), b.start.macro_index + 1, update) for b in endpoints]
        if fallback is not None:
            return Endpoints(states, [], {id(b): fallback for b in endpoints}, 0)
        calls = self.call_critic(states, cfg.endpoint_samples, seed=sampling_seed(cfg.seed, update, ENDPOINT_CRITIC))
        valued = [any(v is not None for v in c.values) for c in calls]
        values = {id(b): calibration(aggregate_values(c.values), s.milestones_left) if ok else 0.0
                  for b, c, s, ok in zip(endpoints, calls, states, valued) if ok or cfg.unvalued_endpoint == "zero"}
        return Endpoints(states, calls, values, valued.count(False))

    def _group_signals(self, groups: Sequence[Sequence[Branch]], start_calls: Sequence[CriticCall],
                       endpoint_value: dict[int, float]) -> "GroupSignals":
        """Each group's actor signals (``algorithms.tempo.actor_signals``: returns R_n, advantages
        A_n = R_n - G(s), target G(s)) and its start state's critic signals towards G(s). A branch
        whose environment raised, or whose endpoint has no value, is left out; a group needs 2
        branches left."""
        cfg = self.cfg
        out = GroupSignals(targets=[None] * len(groups))
        for group, (full_group, start_call) in enumerate(zip(groups, start_calls)):
            branch_group = [b for b in full_group if b.stop_reason != ENV_ERROR
                            and (b.stop_reason != MACRO_BOUNDARY or id(b) in endpoint_value)]
            if len(branch_group) < 2:
                out.dropped_groups += 1
                continue
            signals = actor_signals(
                [b.segment_reward for b in branch_group],
                [endpoint_value.get(id(b), 0.0) for b in branch_group],
                [b.terminal for b in branch_group],
                [cfg.invalid_action_penalty * b.unaccepted_actions for b in branch_group],
            )
            out.targets[group] = signals.value_target
            out.degenerate.append(float(signals.degenerate))
            out.value_gaps.append(signals.zero_reward_value_std)
            out.actor += [(branch, advantage, ret, group) for branch, advantage, ret
                          in zip(branch_group, signals.advantages, signals.returns)]
            if start_call.answered:
                out.critic.append((start_call, signals.value_target, group))
        return out

    def _play_audits(self, update: int, groups: Sequence[Sequence[Branch]]) -> tuple[dict[int, Branch], float]:
        """With --audit-weight > 0: one more branch per start group, restored to its start state and
        played to the episode's end (a Monte-Carlo sample of its value). Returns ({group: audit
        branch}, environment seconds); a state that does not restore again gets no audit."""
        if self.cfg.audit_weight <= 0:
            return {}, 0.0
        audits: dict[int, Branch] = {}
        for group, branch_group in enumerate(groups):
            try:
                audits[group] = self._restore_group(branch_group[0].start, group, count=1)[0]
            except RestoreError:
                continue
        env_seconds = run_branches(list(audits.values()), self.sampler, self.protocol, self.params,
                                   self._limits(self.cfg.max_episode_steps), seed=sampling_seed(self.cfg.seed, update, AUDIT))
        self._release(list(audits.values()))
        return audits, env_seconds

    def _audit_boundaries(self, update: int, audits: dict[int, Branch]) -> list[tuple[MacroState, float]]:
        """--audit-boundaries: each state an audit branch passed at a macro-step boundary before its
        end, with the audit's outcome z: a Monte-Carlo sample of that state's value under the
        current policy, at no extra environment step."""
        passed = []
        for audit in audits.values():
            if audit.stop_reason == ENV_ERROR:
                continue
            for k, record in enumerate(audit.rounds[:-1], start=1):
                if record.privileged_info is not None:  # recorded at episode rounds that are multiples of H
                    macro_index = audit.start.macro_index + k // self.cfg.macro_rounds
                    passed.append((audit.state_after(k, macro_index, update), float(audit.won)))
        return passed

    def _actor_batch(self, actor: Sequence[tuple[Branch, float, float, int]],
                     weights: Sequence[float]) -> tuple[list[TrainSample], list[float]]:
        """One actor sample per branch: its advantage (normalised over the batch with
        --normalise-advantages) times its start state's prefix weight w~(s); a sample whose
        advantage is 0 is left out. Returns (samples, the advantages before normalising)."""
        raw = [advantage for _, advantage, _, _ in actor]
        scaled = batch_normalised(raw) if self.cfg.normalise_advantages else raw
        samples = []
        for (branch, _, ret, group), advantage in zip(actor, scaled):
            advantage *= weights[group]  # w~(s) (R_n - G(s)); 1 for a fresh game or without --prefix-is-clip
            if abs(advantage) > ADVANTAGE_EPSILON:
                samples.append(make_sample(branch.tokens, branch.loss_mask, branch.logprobs, advantage, ACTOR, group, ret))
        return samples, raw


@dataclass
class Endpoints:
    states: list[MacroState]  # s_{t+H} of each branch that stopped at its boundary
    calls: list[CriticCall]  # their critic calls
    values: dict[int, float]  # id(branch) -> V(s_{t+H}), for the branches valued
    unvalued: int  # endpoints without a parsed value


@dataclass
class GroupSignals:
    targets: list[float | None]  # per group, G(s) (aligned with the start-state critic calls); None: dropped
    actor: list[tuple[Branch, float, float, int]] = field(default_factory=list)  # (branch, A_n, R_n, group)
    critic: list[tuple[CriticCall, float, int]] = field(default_factory=list)  # each kept group's start call, G(s), group
    degenerate: list[float] = field(default_factory=list)
    value_gaps: list[float] = field(default_factory=list)
    dropped_groups: int = 0

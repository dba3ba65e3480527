"""Complete-episode updates without a critic: multi-turn GRPO (the baseline), FlashREINFORCE, CoPE
and Temporal GRPO.

Episode update: N complete episodes of each game through the same engine as TEMPO; every action of
an episode gets one advantage from its return (less ``--invalid-action-penalty`` per action the
environment did not accept, as in TEMPO's actor), by the estimator's ``outcome_advantages``:
group-relative (multi-turn GRPO, CoPE, ``algorithms.grpo``) or centred on the batch mean
(FlashREINFORCE, ``algorithms.flash_reinforce``, whose trajectory gate runs in the trainer). CoPE
adds each game's successful episodes as action forecasts (``algorithms.cope``). SPO's baseline is a
per-game tracker of past outcomes, which also picks the games (``algorithms.spo``, ``GameTrackers``).

Stage update (Temporal GRPO): the same episodes, each round advantaged against the group on the
stage of the environment's milestones it worked on (``algorithms.temporal_grpo``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from tempo_plugin.algorithms.cope import forecast_weight
from tempo_plugin.algorithms.spo import PRIOR, draw_prioritised, spo_advantages, tracker_update, tracker_value
from tempo_plugin.algorithms.stats import mean
from tempo_plugin.algorithms.tempo import ADVANTAGE_EPSILON
from tempo_plugin.updates.play import Play, UpdateBatch, rollout_metrics
from tempo_plugin.rollout.engine import Branch
from tempo_plugin.rollout.games import GAME_DRAW, sampling_seed, train_pool
from tempo_plugin.estimators import ESTIMATORS
from tempo_plugin.rollout.samples import ACTOR, FORECAST, TrainSample, make_sample


@dataclass
class GameTrackers:
    """SPO's Beta(alpha, beta) per training game (``algorithms.spo``); a game never played has the
    prior. A resumed run gets them back from its checkpoint (``Progress.trackers``)."""

    table: dict[int, tuple[float, float]] = field(default_factory=dict)

    def value(self, game: int) -> float:
        return tracker_value(*self.table.get(game, (PRIOR, PRIOR)))

    def count(self, game: int, returns: Sequence[float], rho: float) -> None:
        """Forget by rho, then count ``returns`` (clipped to [0, 1])."""
        alpha, beta = self.table.get(game, (PRIOR, PRIOR))
        self.table[game] = tracker_update(alpha, beta, [min(max(r, 0.0), 1.0) for r in returns], rho)

    def rows(self) -> dict[str, list[float]]:
        return {str(game): list(ab) for game, ab in self.table.items()}

    def restore(self, rows: dict[str, Sequence[float]]) -> None:
        self.table = {int(game): (float(ab[0]), float(ab[1])) for game, ab in rows.items()}


class EpisodeUpdates(Play):
    """The critic-free updates of complete episodes: multi-turn GRPO, FlashREINFORCE, CoPE, SPO and
    Temporal GRPO."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.trackers = GameTrackers()

    def prioritised_games(self, update: int) -> list[int]:
        """SPO: S = --states-per-batch distinct games of the --train-games pool, drawn by priority."""
        pool = train_pool(self.cfg.seed, self.cfg.train_games)
        return draw_prioritised(pool, [self.trackers.value(g) for g in pool], self.cfg.states_per_batch,
                                sampling_seed(self.cfg.seed, update, GAME_DRAW))

    def episode_update(self, update: int, games: Sequence[int]) -> UpdateBatch:
        """N = --branches complete episodes of each game; R'_i = R_i - c u_i the episode return less
        the invalid-action penalty; A_i = the estimator's outcome_advantages(R') on every action of
        episode i: (R'_i - mean) / (std + eps) over the game's episodes (GRPO, CoPE) or R'_i - the
        batch's mean (FlashREINFORCE); SPO: R'_i - v_hat_old(x_i), normalised over the batch, then
        the played games' trackers count the outcomes. CoPE: each won episode of game x also trains
        as a forecast of its own actions, weight w_x = eta N / max(1, |S_x|) per action token."""
        cfg = self.cfg
        estimator = ESTIMATORS[cfg.advantage_estimator]
        branches, env_errors, rollout_seconds = self.play_groups(games, update)
        returns = [b.segment_reward for b in branches]
        shaped = [shaped_episode_return(b, cfg.invalid_action_penalty) for b in branches]
        tracker_metrics = {}
        if estimator.tracker:
            baselines = [self.trackers.value(games[b.group]) for b in branches]
            advantages = spo_advantages(shaped, baselines)
            for g in sorted({b.group for b in branches}):
                self.trackers.count(games[g], [b.segment_reward for b in branches if b.group == g], cfg.spo_discount)
            tracker_metrics = {"spo/baseline_mean": mean(baselines), "spo/tracked_games": float(len(self.trackers.table))}
        else:
            advantages = estimator.outcome_advantages(shaped, cfg.branches)
        samples = [
            make_sample(b.tokens, b.loss_mask, b.logprobs, a, ACTOR, b.group, ret)
            for b, a, ret in zip(branches, advantages, returns) if abs(a) > ADVANTAGE_EPSILON
        ]
        actor_samples = len(samples)
        if estimator.forecasts and cfg.forecast_weight > 0:
            samples += forecast_samples(branches, cfg.branches, cfg.forecast_weight)
        groups = [advantages[g * cfg.branches:(g + 1) * cfg.branches] for g in range(len(branches) // cfg.branches)]
        metrics = {
            **episode_metrics(branches, env_errors),
            "actor/degenerate_group_rate": mean([float(all(abs(a) <= ADVANTAGE_EPSILON for a in g)) for g in groups]),
            "train/actor_samples": float(actor_samples),
            **({"train/forecast_samples": float(len(samples) - actor_samples)} if estimator.forecasts else {}),
            **tracker_metrics,
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
        branches, env_errors, rollout_seconds = self.play_groups(games, update, stages=True)
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
                sample = round_sample(branch, round_advantages(stage_of_rounds(row, len(branch.rounds)), adv_row),
                                      cfg.invalid_action_penalty)
                samples += [sample] if sample else []
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

def round_sample(branch: Branch, advantages: Sequence[float], penalty: float) -> TrainSample | None:
    """The actor sample of an episode whose round r gets advantages[r] less c = ``penalty`` when the
    environment did not accept its action; None when every round's is about 0 (nothing to train)."""
    per_round = [a - penalty * (not r.admissible) for a, r in zip(advantages, branch.rounds)]
    if all(abs(a) <= ADVANTAGE_EPSILON for a in per_round):
        return None
    return make_sample(branch.tokens, branch.loss_mask, branch.logprobs, per_round, ACTOR, branch.group,
                       branch.segment_reward)


def forecast_samples(branches: Sequence[Branch], episodes_per_game: int, eta: float) -> list[TrainSample]:
    """CoPE's forecasts: every won episode, its action tokens teacher-forced with weight
    w_x = eta N / max(1, |S_x|) (|S_x| the won episodes of its game) in a cross-entropy sum."""
    won = {g: sum(b.won for b in branches if b.group == g) for g in {b.group for b in branches}}
    return [make_sample(b.tokens, b.loss_mask, b.logprobs, forecast_weight(won[b.group], episodes_per_game, eta),
                        FORECAST, b.group, b.segment_reward) for b in branches if b.won]


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



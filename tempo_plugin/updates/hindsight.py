"""LVRL's update: complete episodes valued in hindsight by a frozen model (``algorithms.lvrl``).

N = --branches complete episodes of each game; a frozen copy of the policy as RL started (the
run's ``hindsight_sampler``; it never trains) reads each finished episode with the hindsight prompt
(``critic.prompt.hindsight_messages``) once per round boundary t = 1 .. T-1 and gives V~_t by the
expected-value readout by tenths (``critic.readout.TENTHS``: 11 answer prefixes that marginalise the
critic's 101 ``<value>`` answers; the full 101 where the tokenizer does not split the answers at
those prefixes). No parse can fail. The anchored advantages A_t = V~_{t+1} - V~_t between V~_0 =
the group's mean return and V~_T = the episode's return, divided by the group's step standard
deviation, go to the episode's rounds, less --invalid-action-penalty on a round whose action the
environment did not accept.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from tempo_plugin.algorithms.lvrl import anchored_round_advantages, normalised_by_group_steps
from tempo_plugin.algorithms.stats import mean, pearson, population_std
from tempo_plugin.algorithms.tempo import ADVANTAGE_EPSILON
from tempo_plugin.critic.prompt import hindsight_messages
from tempo_plugin.critic.readout import TENTHS, expected_value, expected_value_by_tenths, value_answer_texts
from tempo_plugin.rollout.engine import Branch
from tempo_plugin.rollout.samples import TrainSample
from tempo_plugin.updates.episodes import episode_metrics, round_sample
from tempo_plugin.updates.play import Play, UpdateBatch


HINDSIGHT_PROMPTS_PER_CALL = 8
"""Round boundaries scored per call on the shared context (its keys and values are copied per row)."""


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """The number of leading tokens all ``rows`` share, less one if that is all of the shortest (every
    row keeps at least one token of its own)."""
    shortest = min(len(r) for r in rows)
    n = 0
    while n < shortest and all(r[n] == rows[0][n] for r in rows):
        n += 1
    return min(n, shortest - 1)


class HindsightUpdates(Play):
    """LVRL: episode updates whose per-round credit a frozen model distributes in hindsight."""

    def hindsight_values(self, episode: Branch, group_wins: int, group_size: int) -> list[float]:
        """V~_1 .. V~_{T-1} of one finished episode, by the frozen model's expected-value readout.
        The T-1 prompts differ only in their last line: their common tokens run once as the
        context, each row is one prompt's own ending and one answer (a row's ending adds the same
        log-likelihood to each of its answers, which the readout's normalisation cancels)."""
        if self.hindsight_sampler is None:
            raise RuntimeError("LVRL needs a frozen hindsight model (Play.hindsight_sampler); the driver sets it")
        actions = [r.action for r in episode.rounds]
        prompts = [self.protocol.render_prompt(hindsight_messages(
            episode.start.task, episode.start.privileged_info, actions, episode.won, t, group_wins, group_size))
            for t in range(1, len(actions))]
        if not prompts:
            return []
        shared = common_prefix_length(prompts)
        answers, read = self.hindsight_answers()
        values: list[float] = []
        for start in range(0, len(prompts), HINDSIGHT_PROMPTS_PER_CALL):
            rows = [p[shared:] + a for p in prompts[start:start + HINDSIGHT_PROMPTS_PER_CALL] for a in answers]
            logprobs = self.hindsight_sampler.answer_logprobs(prompts[0][:shared], rows)
            values += [read(logprobs[i:i + len(answers)]) for i in range(0, len(rows), len(answers))]
        return values

    def hindsight_answers(self) -> tuple[list[list[int]], Callable[[Sequence[float]], float]]:
        """The answers the readout scores and how it reads them: the 11 tenths prefixes when each is
        the start of the tokens of every grid answer it stands for, else the 101 grid answers."""
        if "_hindsight_answers" not in self.__dict__:
            full = [self.protocol.encode(text) for text in value_answer_texts()]
            tenths = [self.protocol.encode(prefix) for prefix, _ in TENTHS]
            tenth_of = [min(j // 10, 10) for j in range(len(full))]  # 0.00-0.09 -> "<value>0.0", ..., 1.00 -> "<value>1"
            splits = all(answer[:len(tenths[b])] == tenths[b] for answer, b in zip(full, tenth_of))
            self.__dict__["_hindsight_answers"] = (tenths, expected_value_by_tenths) if splits else (full, expected_value)
        return self.__dict__["_hindsight_answers"]

    def hindsight_update(self, update: int, games: Sequence[int]) -> UpdateBatch:
        branches, env_errors, rollout_seconds = self.play_groups(games, update)
        tic = time.perf_counter()
        samples: list[TrainSample] = []
        degenerate: list[float] = []
        read: list[float] = []
        outcomes: list[float] = []  # the return of the episode each value was read in
        for g in sorted({b.group for b in branches}):
            group = [b for b in branches if b.group == g]
            returns = [b.segment_reward for b in group]
            group_mean = mean(returns)  # V~_0 of every episode of the group
            wins = sum(b.won for b in group)
            hindsight = [self.hindsight_values(b, wins, len(group)) for b in group]
            read += [v for row in hindsight for v in row]
            outcomes += [r for row, r in zip(hindsight, returns) for _ in row]
            raw = [anchored_round_advantages(h, r, group_mean) for h, r in zip(hindsight, returns)]
            table = normalised_by_group_steps(raw)
            degenerate.append(float(all(abs(a) <= ADVANTAGE_EPSILON for row in table for a in row)))
            for branch, row in zip(group, table):
                sample = round_sample(branch, row, self.cfg.invalid_action_penalty)
                samples += [sample] if sample else []
        metrics = {
            **episode_metrics(branches, env_errors),
            "actor/degenerate_group_rate": mean(degenerate),
            "hindsight/value_mean": mean(read),
            "hindsight/value_std": population_std(read),  # near 0: the frozen model gives one answer everywhere
            "hindsight/values": float(len(read)),
            "train/actor_samples": float(len(samples)),
            "train/critic_samples": 0.0,
            "time/rollout": rollout_seconds,
            "time/critic": time.perf_counter() - tic,
        }
        # does the frozen model read the outcome it is shown? near 0: its values carry no credit
        corr = pearson(read, outcomes) if metrics["hindsight/value_std"] > 1e-9 else None
        if corr is not None:  # undefined where every value, or every outcome, is the same
            metrics["hindsight/outcome_corr"] = corr
        return UpdateBatch(samples=samples, metrics=metrics)

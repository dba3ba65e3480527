"""The generative critic: the policy prompted with a state and its privileged facts, K sampled
answers per state parsed into values (``critic/``), and the training signals of each answer
(``algorithms.tempo.critic_signals``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from tempo_plugin.algorithms.stats import mean, pearson
from tempo_plugin.algorithms.tempo import ADVANTAGE_EPSILON, CriticSignals, critic_signals
from tempo_plugin.critic import critic_messages, parse_value, reference_critic_messages
from tempo_plugin.method.play import Play
from tempo_plugin.rollout.sampler import Completion, Request
from tempo_plugin.rollout.samples import CRITIC, TrainSample, make_sample
from tempo_plugin.states.state import MacroState


@dataclass(frozen=True)
class CriticCall:
    """K critic samples at one state; ``completions`` is empty when the prompt was too long."""

    prompt_ids: list[int]
    completions: list[Completion]

    @cached_property
    def values(self) -> list[float | None]:
        return [parse_value(c.text) for c in self.completions]


class CriticCalls(Play):
    """The generative critic on the run's sampler: its prompt, K samples per state, their signals."""

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

"""The generative critic: the policy prompted with a state and its privileged facts. With
``--critic-value sampled``, K sampled answers per state parsed into values (``critic/``) and the
training signals of each answer (``algorithms.tempo.critic_signals``); with ``expected``, the
expected value under the critic's distribution over its answers and the value cross-entropy's
two-hot samples (``critic/readout.py``); with ``expected-readout``, the sampled critic's training
and the expected critic's values."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from tempo_plugin.algorithms.stats import mean, pearson, population_std
from tempo_plugin.algorithms.tempo import ADVANTAGE_EPSILON, CriticSignals, critic_scale, critic_signals
from tempo_plugin.critic import critic_messages, parse_value, reference_critic_messages
from tempo_plugin.critic.readout import VALUE_ANSWER_ROOM, VALUE_TAG, expected_value, two_hot, value_answer_texts
from tempo_plugin.updates.play import Play
from tempo_plugin.rollout.sampler import Completion, Request
from tempo_plugin.rollout.samples import CRITIC, VALUE, TrainSample, make_sample
from tempo_plugin.states.state import MacroState


@dataclass(frozen=True)
class Readout:
    """The expected-value readout after one critic completion (``--critic-value expected``): the
    completion's tokens before its ``<value>`` (its reasoning; all of it when it wrote none), the
    text between them and the tag (``lead``, usually "" or " "), and V = sum_j v_j p_j there."""

    reasoning: list[int]
    lead: str
    value: float


@dataclass(frozen=True)
class CriticCall:
    """The critic at one state: K sampled completions (none when the prompt was too long) and, with
    ``--critic-value expected``, the readout after each of them."""

    prompt_ids: list[int]
    completions: list[Completion]
    readouts: tuple[Readout, ...] = ()

    @property
    def answered(self) -> bool:
        return bool(self.completions)

    @cached_property
    def values(self) -> list[float | None]:
        """One value per completion: its readout, else its parsed ``<value>`` (None: no parse)."""
        if self.readouts:
            return [r.value for r in self.readouts]
        return self.parsed_values

    @cached_property
    def parsed_values(self) -> list[float | None]:
        """The ``<value>`` each completion wrote (None: no parse): the sampled critic's actions."""
        return [parse_value(c.text) for c in self.completions]


class CriticCalls(Play):
    """The generative critic on the run's critic sampler (the policy's own sampler unless
    --critic-weights separate): its prompt, K samples per state, their signals."""

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

    def value_answers(self, lead: str) -> list[list[int]]:
        """The tokens of each answer of ``critic.readout.VALUE_GRID`` written after ``lead``."""
        cache = self.__dict__.setdefault("_value_answers", {})
        if lead not in cache:
            cache[lead] = [self.protocol.encode(lead + text) for text in value_answer_texts()]
        return cache[lead]

    def call_critic(self, states: Sequence[MacroState], samples: int, seed: int) -> list[CriticCall]:
        """``samples`` critic completions per state, all in one sampler call; with
        ``--critic-value expected`` or ``expected-readout`` also the readout after each (``readout``)."""
        prompts = [self.critic_prompt(s) for s in states]
        room = VALUE_ANSWER_ROOM if self.cfg.critic_value != "sampled" else 0  # the readout's answer after it
        budget = self.cfg.max_trajectory_tokens - self.cfg.critic_max_tokens - room
        requests = [
            Request(p, self.cfg.critic_max_tokens) for p in prompts if len(p) <= budget for _ in range(samples)
        ]
        completions = iter(self.critic_sampler.generate(requests, self.params, seed=seed) if requests else [])
        calls = [
            CriticCall(p, [next(completions) for _ in range(samples)] if len(p) <= budget else [])
            for p in prompts
        ]
        if self.cfg.critic_value == "sampled":
            return calls
        read: dict[tuple[tuple[int, ...], str], float] = {}  # completions with the same reasoning: read once
        return [CriticCall(c.prompt_ids, c.completions, tuple(self.readout(c.prompt_ids, x, read) for x in c.completions))
                for c in calls]

    def readout(self, prompt: Sequence[int], completion: Completion,
                read: dict[tuple[tuple[int, ...], str], float] | None = None) -> Readout:
        """The expected value after ``completion``'s reasoning: where it wrote ``<value>``, the
        answers are scored in its place; where it wrote none (cut off, or answered otherwise), after
        all of it (its stop token left out), with a space before the tag. ``read``: values already
        read, by (context, lead)."""
        reasoning, lead = self.value_cut(completion)
        key = (tuple(prompt) + tuple(reasoning), lead)
        read = {} if read is None else read
        if key not in read:
            read[key] = expected_value(self.critic_sampler.answer_logprobs(list(key[0]), self.value_answers(lead)))
        return Readout(reasoning, lead, read[key])

    def value_cut(self, completion: Completion) -> tuple[list[int], str]:
        """(the tokens before the one where ``<value>`` starts, the text of that token before the
        tag); without a tag (all tokens but a final stop token, " ")."""
        tokens = completion.token_ids
        at = self.protocol.decode(tokens).lower().find(VALUE_TAG)
        if at >= 0:  # the first token that reaches into the tag: the tag may be split over several
            for i in range(len(tokens)):
                text = self.protocol.decode(tokens[: i + 1])
                if len(text) > at:
                    return list(tokens[:i]), text[len(self.protocol.decode(tokens[:i])):at]
        end = len(tokens) - (1 if tokens and tokens[-1] in self.protocol.stop_token_ids else 0)
        return list(tokens[:end]), " "

    def critic_signals(self, call: CriticCall, target: float) -> CriticSignals:
        """The K critic signals (errors, rewards, advantages) of one state valued towards ``target``:
        of each completion's readout with the expected critic, else of the value it wrote (the
        sampled critic's reward is its sampled action's, whatever it is valued by)."""
        values = call.values if self.cfg.critic_value == "expected" else call.parsed_values
        return critic_signals(values, target, self.cfg.r_max, self.cfg.critic_reward)

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

    def value_samples(self, call: CriticCall, target: float, group: int) -> list[TrainSample]:
        """The value cross-entropy's samples of one state (``critic/readout.py``): after each of its
        K completions' reasoning, each answer a_j of the two-hot target q towards ``target``, its
        tokens weighted beta q_j / K."""
        weights: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {}  # the same answer after the same reasoning: one sample
        for r in call.readouts:
            for j, weight in two_hot(target):
                key = (tuple(call.prompt_ids + r.reasoning), tuple(self.value_answers(r.lead)[j]))
                weights[key] = weights.get(key, 0.0) + self.cfg.value_loss_weight * weight / len(call.readouts)
        return [make_sample(list(context + answer), [0] * len(context) + [1] * len(answer), [0.0] * (len(context) + len(answer)),
                            weight, VALUE, group, target) for (context, answer), weight in weights.items()]

    def reasoning_samples(self, call: CriticCall, signals: CriticSignals, group: int, scale: float) -> list[TrainSample]:
        """The reasoning of each completion, up to its ``<value>``, with its group-relative advantage
        ``scale`` x A_k of its readout's error (none for a completion without reasoning, or with A_k 0)."""
        samples = []
        for r, completion, advantage, reward in zip(call.readouts, call.completions, signals.advantages, signals.rewards):
            if not r.reasoning or abs(advantage) <= ADVANTAGE_EPSILON:
                continue
            tokens = call.prompt_ids + r.reasoning
            mask = [0] * len(call.prompt_ids) + [1] * len(r.reasoning)
            logprobs = [0.0] * len(call.prompt_ids) + list(completion.logprobs[: len(r.reasoning)])
            samples.append(make_sample(tokens, mask, logprobs, advantage * scale, CRITIC, group, reward))
        return samples

    def critic_training(self, calls: Sequence[tuple[CriticCall, float, int]], scale_std: float = 0.0
                        ) -> tuple[list[TrainSample], list[float], float, list[float]]:
        """The critic's training samples for (call, value target, group) triples, the group-relative
        ones with advantages rescaled to std ``scale_std`` over all of them (0: as they are).
        Sampled critic: each completion's, rewarded by its parsed value's error
        (``algorithms.tempo.critic_signals``). Expected critic: the value cross-entropy's
        (``value_samples``), and each completion's reasoning rewarded by its readout's error.
        Returns (samples, |error| of each value, sigma of the group-relative advantages before
        scaling, degenerate flag per state: 1 where every value of the state is the same and
        nothing else trains it, so that the group-relative reward cannot move it)."""
        signals = [self.critic_signals(call, target) for call, target, _ in calls]
        sigma = population_std([a for s in signals for a in s.advantages])
        scale = critic_scale(sigma, scale_std)
        samples: list[TrainSample] = []
        errors: list[float] = []
        expected = self.cfg.critic_value == "expected"
        for (call, target, group), signal in zip(calls, signals):
            if expected:
                samples += self.value_samples(call, target, group)
                samples += self.reasoning_samples(call, signal, group, scale)
            else:
                samples += self.critic_samples(call, signal, group, scale)
            errors += signal.errors
        degenerate = [0.0 if expected else float(len(set(call.parsed_values)) == 1) for call, _, _ in calls]
        return samples, errors, sigma, degenerate

    @staticmethod
    def value_pairs(calls: Sequence[CriticCall], targets: Sequence[float | None]) -> list[tuple[float, float]]:
        """(mean parsed estimate, target) of each state that has a target and a parsed critic value;
        ``targets[i]`` is call i's value target, None where it has none (a dropped TD group)."""
        return [(mean([v for v in c.values if v is not None]), t) for c, t in zip(calls, targets, strict=True)
                if _paired(c, t)]

    @staticmethod
    def pair_levels(calls: Sequence[CriticCall], targets: Sequence[float | None],
                    states: Sequence[MacroState]) -> list[int | None]:
        """The milestones left at each state ``value_pairs(calls, targets)`` keeps, in its order."""
        return [s.milestones_left for c, t, s in zip(calls, targets, states, strict=True) if _paired(c, t)]

    @staticmethod
    def _critic_metrics(calls: Sequence[CriticCall], targets: Sequence[float | None],
                        answered: Sequence[tuple[float, float]]) -> dict[str, float]:
        """``answered``: ``value_pairs(calls, targets)``."""
        values = [v for c in calls for v in c.values]
        answered_calls = [c for c in calls if c.completions]
        estimates = [a for a, _ in answered]
        given = [t for t in targets if t is not None]
        parsed = {v for v in values if v is not None}
        metrics = {
            "critic/parse_failure_rate": mean([float(v is None) for v in values]),
            # K identical completions: every critic advantage of the group is 0, whatever the error
            "critic/identical_group_rate": mean([float(len({x.text for x in c.completions}) == 1) for c in answered_calls]),
            "critic/distinct_values": float(len(parsed)),
            "critic/prompt_too_long_rate": mean([float(not c.answered) for c in calls]),
            "critic/mean_estimate_mean": mean(estimates),
            "critic/estimate_std": population_std(estimates),
            "critic/value_target_mean": mean(given),
            "critic/value_target_std": population_std(given),
        }
        corr = pearson([a for a, _ in answered], [t for _, t in answered])
        if corr is not None:
            metrics["critic/value_corr"] = corr
        return metrics


def _paired(call: CriticCall, target: float | None) -> bool:
    """Whether a state has a (mean parsed estimate, target) pair: a target and a parsed value."""
    return target is not None and any(v is not None for v in call.values)

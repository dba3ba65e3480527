"""Macro-step rollouts: N branches x at most H rounds from each start state, through a Sampler.

Stop reasons, checked after every round in this order: the environment ended (``won`` or
``environment_done``); the absolute round reached T (``max_steps``); the segment reached H rounds
(``macro_boundary``); the next prompt exceeds the token cap (``trajectory_too_long``, also when no
generation budget is left). Every stop reason except ``macro_boundary`` is terminal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tempo_plugin.envs.base import Env, milestones_left
from tempo_plugin.rollout.games import sub_seed
from tempo_plugin.rollout.protocol import INVALID_ACTION, ChatProtocol, parse_action
from tempo_plugin.rollout.sampler import Request, Sampler, SamplingParams
from tempo_plugin.states.state import MacroState

MACRO_BOUNDARY = "macro_boundary"
ENV_ERROR = "env_error"
"""Stop reason of a branch whose environment raised: the update drops it (never trains on it)."""


@dataclass(frozen=True)
class RoundRecord:
    completion_text: str
    action: str
    observation: str
    reward: float
    done: bool
    won: bool
    parsed: bool
    admissible: bool
    prompt_length: int  # length of the token sequence after this round (= the next prompt)
    logprob_sum: float
    privileged_info: str | None  # None where no state was recorded (RolloutLimits.state_every)
    snapshot: Any
    stages_completed: int | None = None  # milestones reached after this round (RolloutLimits.stages)
    milestones_left: int | None = None  # envs.base.milestones_left where a state was recorded, else None


@dataclass
class Branch:
    """One branch of a group: its environment, its growing token sequence and its rounds."""

    start: MacroState
    env: Env
    group: int
    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    rounds: list[RoundRecord] = field(default_factory=list)
    stop_reason: str | None = None
    error: str = ""  # what the environment raised (stop reason ENV_ERROR)
    stage_count: int | None = None  # the environment's milestones, when they are recorded (Temporal GRPO)

    @classmethod
    def from_state(cls, state: MacroState, env: Env, group: int) -> "Branch":
        n = len(state.token_prefix)
        return cls(start=state, env=env, group=group, tokens=list(state.token_prefix), loss_mask=[0] * n, logprobs=[0.0] * n)

    @property
    def terminal(self) -> bool:
        return self.stop_reason != MACRO_BOUNDARY

    @property
    def segment_reward(self) -> float:
        return sum(r.reward for r in self.rounds)

    @property
    def unaccepted_actions(self) -> int:
        """Rounds whose action the environment did not accept (unparsed or inadmissible)."""
        return sum(not r.admissible for r in self.rounds)

    @property
    def won(self) -> bool:
        return any(r.won for r in self.rounds)

    def state_after(self, k: int, macro_index: int, policy_version: int) -> MacroState:
        """The MacroState after the first k rounds of this segment (1 <= k <= len(rounds))."""
        if not 1 <= k <= len(self.rounds):
            raise ValueError(f"branch has {len(self.rounds)} rounds, cannot cut after {k}")
        done = self.rounds[:k]
        last = done[-1]
        if last.privileged_info is None:
            raise ValueError(f"no state was recorded after round {self.start.round_index + k} "
                             "(RolloutLimits.state_every, or the episode ended there)")
        messages = list(self.start.messages)
        for record in done:
            messages += [("assistant", record.completion_text), ("user", record.observation)]
        return MacroState(
            env_seed=self.start.env_seed,
            task=self.start.task,
            action_history=self.start.action_history + tuple(r.action for r in done),
            observation=last.observation,
            privileged_info=last.privileged_info,
            token_prefix=tuple(self.tokens[: last.prompt_length]),
            messages=tuple(messages),
            round_index=self.start.round_index + k,
            macro_index=macro_index,
            snapshot=last.snapshot,
            prefix_logprob_sum=self.start.prefix_logprob_sum + sum(r.logprob_sum for r in done),
            policy_version=policy_version,
            assistant_spans=self.start.assistant_spans + trained_spans(self.loss_mask, len(self.start.token_prefix),
                                                                       last.prompt_length),
            milestones_left=last.milestones_left,
        )


def trained_spans(mask: Sequence[int], start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The [a, b) ranges of consecutive 1s in ``mask[start:end]``, as indices of ``mask``."""
    spans = []
    i = start
    while i < end:
        if mask[i]:
            j = i
            while j < end and mask[j]:
                j += 1
            spans.append((i, j))
            i = j
        else:
            i += 1
    return tuple(spans)


@dataclass(frozen=True)
class RolloutLimits:
    horizon: int  # H (T for complete episodes)
    max_episode_steps: int  # T
    max_trajectory_tokens: int
    max_assistant_tokens: int
    state_every: int = 1  # record privileged info and a snapshot only after episode rounds that are multiples of this
    stages: bool = False  # record the environment's milestones after every round (Temporal GRPO)


def fresh_state(env: Env, seed: int, protocol: ChatProtocol) -> MacroState:
    """A new game at round 0: the first actor prompt rendered from the system and task messages."""
    observation = env.reset(seed)
    messages = protocol.initial_messages(env.task, observation)
    return MacroState(
        env_seed=seed,
        task=env.task,
        action_history=(),
        observation=observation,
        privileged_info=env.privileged_info(),
        token_prefix=tuple(protocol.render_prompt(messages)),
        messages=tuple((m["role"], m["content"]) for m in messages),
        round_index=0,
        macro_index=0,
        snapshot=env.snapshot() if env.supports_snapshot else None,
        milestones_left=milestones_left(env),
    )


def _stop_reason(branch: Branch, record: RoundRecord, limits: RolloutLimits) -> str | None:
    if record.done:
        return "won" if record.won else "environment_done"
    if branch.start.round_index + len(branch.rounds) >= limits.max_episode_steps:
        return "max_steps"
    if len(branch.rounds) >= limits.horizon:
        return MACRO_BOUNDARY
    if len(branch.tokens) > limits.max_trajectory_tokens:
        return "trajectory_too_long"
    return None


def run_branches(
    branches: Sequence[Branch],
    sampler: Sampler,
    protocol: ChatProtocol,
    params: SamplingParams,
    limits: RolloutLimits,
    seed: int,
    on_round: Callable[[int], None] | None = None,
) -> float:
    """Advance every branch in lockstep until each has a stop reason. Mutates the branches.

    Returns the seconds spent inside environment steps.
    """
    env_seconds = 0.0
    for round_no in range(limits.horizon):
        live: list[Branch] = []
        requests: list[Request] = []
        for branch in branches:
            if branch.stop_reason is not None:
                continue
            budget = min(limits.max_assistant_tokens, limits.max_trajectory_tokens - len(branch.tokens))
            if budget < 1:
                branch.stop_reason = "trajectory_too_long"
                continue
            live.append(branch)
            requests.append(Request(prompt_ids=branch.tokens, max_new_tokens=budget))
        if not live:
            return env_seconds
        completions = sampler.generate(requests, params, seed=sub_seed(seed, round_no))
        for branch, completion in zip(live, completions):
            action = parse_action(completion.text)
            tic = time.perf_counter()
            try:
                result = branch.env.step(action)
                # Only a macro-step boundary can become a MacroState; elsewhere the environment's
                # planner (ALFWorld, TextWorld) would run for an answer nobody reads.
                if (branch.start.round_index + len(branch.rounds) + 1) % limits.state_every == 0 and not result.done:
                    privileged_info = branch.env.privileged_info()
                    snapshot = branch.env.snapshot() if branch.env.supports_snapshot else None
                    left = milestones_left(branch.env)
                else:
                    privileged_info, snapshot, left = None, None, None
                stages = branch.env.stages_completed() if limits.stages else None
            except Exception as error:  # one broken environment must not end the update
                branch.stop_reason, branch.error = ENV_ERROR, f"{type(error).__name__}: {error}"
                continue
            finally:
                env_seconds += time.perf_counter() - tic
            next_tokens, completion_end = protocol.extend(branch.tokens, completion.token_ids, result.observation)
            context = len(next_tokens) - completion_end
            branch.loss_mask += [1] * len(completion.token_ids) + [0] * context
            branch.logprobs += list(completion.logprobs) + [0.0] * context
            branch.tokens = next_tokens
            record = RoundRecord(
                completion_text=completion.text,
                action=action,
                observation=result.observation,
                reward=float(result.reward),
                done=result.done,
                won=result.won,
                parsed=action != INVALID_ACTION,
                admissible=bool(result.info.get("admissible", action != INVALID_ACTION)),
                prompt_length=len(next_tokens),
                logprob_sum=float(sum(completion.logprobs)),
                privileged_info=privileged_info,
                snapshot=snapshot,
                stages_completed=stages,
                milestones_left=left,
            )
            branch.rounds.append(record)
            branch.stop_reason = _stop_reason(branch, record, limits)
        if on_round is not None:
            on_round(round_no)
    for branch in branches:
        if branch.stop_reason is None:
            branch.stop_reason = "max_steps"
    return env_seconds

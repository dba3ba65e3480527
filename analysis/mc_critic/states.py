"""The states the critics are measured on.

Agent environments: the run's actor plays one episode on each of the first ``games`` held-out games
(``rollout.games.eval_games`` on the environments of ``envs.eval_env_factory``: for TextWorld and
ALFWorld a folder of games training never plays); the states are the macro-step boundaries of each episode (rounds
0, E, 2E, ... before it ends, E = --every-rounds, default the run's H), taken as MacroStates with
``Branch.state_after``, so they restore exactly (snapshot or replay, checked against the saved
observation) and keep the exact token prefix the actor was sampled on.

Single-turn tasks: the actor answers each of the first ``games`` held-out problems once; the states
are the prompt plus the first 0, k, 2k, ... tokens of the answer (k = --every-tokens), before it ends.

Action children (``force_action``): a state with an action forced as its next step. The forced
round is built as the engine builds a round (``run_branches``): the completion is the action in its
tags plus the end-of-turn token (the actor's answer format), the environment steps it, and
``ChatProtocol.extend`` appends closing, observation and next assistant header to the prefix.

Every state has a content id (a hash of the game, actions and tokens), used as the cache key.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tempo_plugin.envs.base import Env, milestones_left
from tempo_plugin.rollout.engine import Branch, RoundRecord
from tempo_plugin.rollout.games import sub_seed
from tempo_plugin.rollout.protocol import INVALID_ACTION, ChatProtocol, format_action, parse_action
from tempo_plugin.states.restore import restore_env
from tempo_plugin.states.state import MacroState


@dataclass
class State:
    """One measured state. ``trajectory`` and ``order`` place it on the episode (answer) it was cut
    from, for tracking; ``position`` is its round index (agent) or its answer tokens (single-turn).
    A terminal state (only action children can be) has its ``outcome`` (1 won, 0 lost) and is
    neither rolled out nor shown to a critic."""

    id: str
    trajectory: str
    order: int
    position: int
    macro: MacroState | None = None  # agent environments
    prompt_ids: list[int] = field(default_factory=list)  # single-turn tasks
    response_ids: list[int] = field(default_factory=list)  # the first `position` answer tokens
    label: str = ""
    max_new_tokens: int = 0  # single-turn: generation budget left after the prefix
    terminal: bool = False
    outcome: float | None = None
    parent: str | None = None  # action children: the state the action was forced in
    action: str | None = None


def _digest(*parts: Any) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def macro_id(state: MacroState) -> str:
    return "a" + _digest(state.env_seed, state.action_history, state.round_index, state.token_prefix)


def token_id(prompt_ids: Sequence[int], response_ids: Sequence[int], label: str) -> str:
    return "t" + _digest(tuple(prompt_ids), tuple(response_ids), label)


# -- agent environments ---------------------------------------------------------------------------------


def agent_states(rollout: Any, games: Sequence[int], every_rounds: int, seed: int, rows: int) -> list[State]:
    """One episode per game with the run's actor (``rollout``: a TempoRollout), in batches of at most
    ``rows`` games; its states at rounds 0, E, 2E, ... below its length."""
    horizon = rollout.cfg.macro_rounds
    states: list[State] = []
    for start in range(0, len(games), rows):
        chunk = list(games[start:start + rows])
        for game, branch in zip(chunk, rollout.play_episodes(chunk, seed=sub_seed(seed, start))):
            cuts = [0] + list(range(every_rounds, len(branch.rounds), every_rounds))
            for order, k in enumerate(cuts):
                macro = branch.start if k == 0 else branch.state_after(k, k // horizon, 0)
                states.append(State(id=macro_id(macro), trajectory=f"game {game}", order=order,
                                    position=macro.round_index, macro=macro))
    return states


def restored_env(make_env: Callable[[], Env], state: MacroState, restore: str) -> Env:
    env = make_env()
    restore_env(env, state, restore)
    return env


def force_action(state: MacroState, action: str, make_env: Callable[[], Env], protocol: ChatProtocol,
                 restore: str = "auto") -> tuple[MacroState, RoundRecord]:
    """The state after taking ``action`` in ``state``, built as ``run_branches`` builds a round from
    a completion that is exactly ``<action>action</action>`` + end-of-turn token."""
    env = restored_env(make_env, state, restore)
    text = format_action(action)
    completion = protocol.encode(text)
    eos = protocol.tokenizer.eos_token_id
    if eos is not None:
        completion.append(eos)
    parsed = parse_action(text)
    result = env.step(parsed)
    branch = Branch.from_state(state, env, group=0)
    next_tokens, completion_end = protocol.extend(branch.tokens, completion, result.observation)
    # as the engine marks a round: the forced completion is the assistant's (no sampler log-prob)
    branch.loss_mask += [1] * len(completion) + [0] * (len(next_tokens) - completion_end)
    branch.logprobs += [0.0] * (len(next_tokens) - len(branch.logprobs))
    record = RoundRecord(
        completion_text=text, action=parsed, observation=result.observation, reward=float(result.reward),
        done=result.done, won=result.won, parsed=parsed != INVALID_ACTION,
        admissible=bool(result.info.get("admissible", parsed != INVALID_ACTION)), prompt_length=len(next_tokens),
        logprob_sum=0.0, privileged_info=env.privileged_info(),
        snapshot=env.snapshot() if env.supports_snapshot else None, milestones_left=milestones_left(env),
    )
    branch.tokens = next_tokens
    branch.rounds.append(record)
    return branch.state_after(1, state.macro_index, state.policy_version), record


def action_children(states: Sequence[State], make_env: Callable[[], Env], protocol: ChatProtocol, cfg: Any,
                    max_states: int, candidates: int, seed: int) -> list[State]:
    """Up to ``max_states`` of ``states`` (a seeded uniform choice) among those with >= 2 admissible
    actions; for each, up to ``candidates`` of its admissible actions (all when there are no more,
    else a seeded choice, in the environment's order) forced as the next step. A child that ends
    the game, reaches round T or the token cap is terminal, with its outcome."""
    if max_states < 1 or candidates < 2:
        return []
    rng = random.Random(seed)
    eligible = []
    for state in states:
        if state.macro is None or state.terminal:
            continue
        actions = restored_env(make_env, state.macro, cfg.restore).admissible_actions()
        if len(actions) >= 2:
            eligible.append((state, actions))
    chosen = sorted(rng.sample(range(len(eligible)), min(max_states, len(eligible))))
    children: list[State] = []
    for index in chosen:
        parent, actions = eligible[index]
        if len(actions) > candidates:
            keep = sorted(rng.sample(range(len(actions)), candidates))
            actions = [actions[i] for i in keep]
        for order, action in enumerate(actions):
            macro, record = force_action(parent.macro, action, make_env, protocol, cfg.restore)
            ended = record.done or macro.round_index >= cfg.max_episode_steps \
                or len(macro.token_prefix) >= cfg.max_trajectory_tokens
            children.append(State(
                id=macro_id(macro), trajectory=parent.trajectory, order=order, position=macro.round_index,
                macro=macro, terminal=ended, outcome=(1.0 if record.won else 0.0) if ended else None,
                parent=parent.id, action=record.action,
            ))
    return children


# -- single-turn tasks ----------------------------------------------------------------------------------


def token_states(responses: Sequence[Any], every_tokens: int, max_new_tokens: int, labels: Sequence[str]) -> list[State]:
    """States at 0, k, 2k, ... answer tokens of each response (``single_turn.Response``), below its length."""
    states: list[State] = []
    for index, (response, label) in enumerate(zip(responses, labels)):
        for order, k in enumerate(range(0, len(response.response_ids), every_tokens)):
            prefix = list(response.response_ids[:k])
            states.append(State(
                id=token_id(response.prompt_ids, prefix, label), trajectory=f"problem {index}", order=order,
                position=k, prompt_ids=list(response.prompt_ids), response_ids=prefix, label=label,
                max_new_tokens=max_new_tokens - k,
            ))
    return states

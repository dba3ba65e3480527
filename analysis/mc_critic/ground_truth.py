"""Monte-Carlo ground truth: the mean outcome of M continuations of each state by the run's actor.

Agent environments: M environments restored to the state (``restore_env``, as the state store
does) and M branches from its token prefix, run to the end of the episode with ``run_branches`` and
the run's limits (T = max_episode_steps, token caps, temperature, top-p); MC value = share won.
Single-turn tasks: M continuations of prompt + answer prefix within the answer's token budget,
each scored by the task's verifier on the whole answer (prefix + continuation).

Branches are packed into sampler batches of at most ``rows`` rows, so the local sampler keeps its
KV cache from round to round (a bigger call is split and re-prefilled every round), states with
similar prefix lengths together (a batch is padded to its longest row). A state's
result is yielded as soon as all its continuations are done, for the cache.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from tempo_plugin.rollout.engine import Branch, RolloutLimits, run_branches
from tempo_plugin.rollout.games import request_seed
from tempo_plugin.rollout.sampler import Request
from tempo_plugin.states.restore import RestoreError, restore_env

from analysis.mc_critic.states import State


DEFAULT_BATCH_TOKENS = 65536
"""Prefix + generation tokens of one sampler batch (the local sampler's own default)."""


def _seed(seed: int, state: State) -> int:
    return request_seed(seed, int(state.id[1:9], 16))


def agent_mc(rollout: Any, states: Sequence[State], samples: int, seed: int, rows: int,
             on_round: Callable[[int], None] | None = None,
             batch_tokens: int = DEFAULT_BATCH_TOKENS) -> Iterator[tuple[State, dict]]:
    """(state, {"wins", "samples", "error"}) for each state, in order of completion; ``on_round(r)``
    after every round of every batch (progress).

    A batch holds at most ``rows`` branches and rows x (longest prefix + max_assistant_tokens) <=
    ``batch_tokens``: the local sampler splits a bigger first call into chunks and then keeps no KV
    cache, re-prefilling every row every round (build it with ``max_batch_tokens=batch_tokens``)."""
    cfg = rollout.cfg
    limits = RolloutLimits(horizon=cfg.max_episode_steps, max_episode_steps=cfg.max_episode_steps,
                           max_trajectory_tokens=cfg.max_trajectory_tokens, max_assistant_tokens=cfg.max_assistant_tokens)
    def width(index: int) -> int:
        return len(states[index].macro.token_prefix) + cfg.max_assistant_tokens

    jobs: list[tuple[int, int]] = []  # (state index, continuations) pieces that fit one batch
    # shortest prefixes first: a batch is left-padded to its longest row, so similar lengths waste less
    for index in sorted(range(len(states)), key=lambda i: len(states[i].macro.token_prefix)):
        piece = max(1, min(rows, batch_tokens // width(index)))
        left = samples
        while left > 0:
            jobs.append((index, min(left, piece)))
            left -= piece
    wins = [0.0] * len(states)
    pieces_left = [0] * len(states)
    for index, _ in jobs:
        pieces_left[index] += 1
    failed: dict[int, str] = {}
    batch: list[tuple[int, int]] = []
    used = 0

    def flush() -> Iterator[tuple[State, dict]]:
        branches: list[Branch] = []
        for index, count in batch:
            state = states[index]
            if index in failed:
                continue
            try:
                for _ in range(count):
                    env = rollout.make_env()
                    restore_env(env, state.macro, cfg.restore)
                    branches.append(Branch.from_state(state.macro, env, group=index))
            except RestoreError as error:
                failed[index] = str(error)
                branches = [b for b in branches if b.group != index]
        if branches:
            run_branches(branches, rollout.sampler, rollout.protocol, rollout.params, limits,
                         seed=_seed(seed, states[batch[0][0]]) + len(branches), on_round=on_round)
        for branch in branches:
            wins[branch.group] += float(branch.won)
        for index, _ in batch:
            pieces_left[index] -= 1
            if pieces_left[index] == 0:
                error = failed.get(index)
                result = {"wins": None if error else wins[index] / samples, "samples": 0 if error else samples}
                if error:
                    result["error"] = error
                yield states[index], result

    longest = 0
    for job in jobs:
        if batch and (used + job[1] > rows or (used + job[1]) * max(longest, width(job[0])) > batch_tokens):
            yield from flush()
            batch, used, longest = [], 0, 0
        batch.append(job)
        used += job[1]
        longest = max(longest, width(job[0]))
    if batch:
        yield from flush()


def token_mc(sampler: Any, protocol: Any, task: Any, params: Any, states: Sequence[State], samples: int, seed: int,
             rows: int) -> Iterator[tuple[State, dict]]:
    """Single-turn: (state, {"wins", "samples"}), M sampled continuations scored by ``task.reward``."""
    per_call = max(1, rows // samples)
    for start in range(0, len(states), per_call):
        chunk = states[start:start + per_call]
        requests = [Request(s.prompt_ids + s.response_ids, max(1, s.max_new_tokens)) for s in chunk for _ in range(samples)]
        completions = sampler.generate(requests, params, seed=_seed(seed, chunk[0]))
        for i, state in enumerate(chunk):
            mine = completions[i * samples:(i + 1) * samples]
            rewards = [float(task.reward(protocol.decode(state.response_ids + c.token_ids), state.label)) for c in mine]
            yield state, {"wins": sum(rewards) / samples, "samples": samples}

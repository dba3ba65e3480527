"""TEMPO's training samples and episodes as slime ``Sample``s.

A slime sample is ``tokens = prompt + response`` with ``response_length`` tokens after the prompt;
``loss_mask`` and ``rollout_log_probs`` cover the response only. Here:

- actor branch: prompt = the saved token prefix of the start state (earlier rounds get no loss),
  response = the H-round segment; mask 1 on the actor's sampled tokens, 0 on observations and
  turn tokens; log-probs from the sampler, 0 where the mask is 0.
- critic sample: prompt = the critic prompt, response = the sampled completion (all trained).
- ``reward`` = the sample's advantage as the update computed it (``TrainSample.advantages``, one
  value on all its trained tokens): the actor's A_n with the invalid-action penalty, the
  normalisation and the prefix importance weight, the critic's A_k with its rescaling. Each group's
  advantages already sum to 0 (actor group of start state g: 2g; its critic group: 2g + 1), so the
  reward post-process, which centres per ``group_index``, hands them to slime unchanged (up to
  rounding). ``metadata[RETURN]`` keeps the raw return R_n or critic reward r_k.
- padding: two-token samples with ``remove_sample=True`` (slime zeroes their loss masks), all in one
  group (one zero-std group in slime's counts, not one per padding sample), so a rollout always
  returns the same number of samples.
- order (``step_order``): slime cuts a rollout into optimiser steps of ``--global-batch-size``
  samples in list order, so actor samples, critic samples and padding are interleaved in
  proportion: every step of a TD rollout trains actor and critic together, as the embedded
  runtime's one step does, and holds its share of the padding. A group may span two steps: each
  sample is its own rollout in slime's loss, and its advantage is fixed before slime sees it.
- Temporal GRPO (``token_advantages=True``): the sample also carries its per-token advantages,
  response part only (one per response token, 0 on context tokens), in
  ``metadata[TOKEN_ADVANTAGES]``; a padding sample carries ``[0.0]``. The reward post-process of
  ``temporal_grpo`` hands them to the actor as the sample's rewards.

The ``Sample`` class is passed in: slime's own at run time, a stand-in with the same fields in
tests where slime is not installed.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence, TypeVar

from tempo_plugin.rollout.engine import Branch
from tempo_plugin.rollout.samples import ACTOR, TrainSample

PADDING = "padding"
TRUNCATED_STOPS = ("trajectory_too_long",)
TOKEN_ADVANTAGES = "tempo_token_advantages"
"""``metadata`` key of a Temporal GRPO sample's per-response-token advantages."""
T = TypeVar("T")
RETURN = "tempo_return"
"""``metadata`` key of a TEMPO sample's raw return R_n (actor) or critic reward r_k."""


def sample_advantage(sample: TrainSample) -> float:
    """The one advantage every trained token of a TEMPO sample carries; ValueError if they differ."""
    values = {a for a, m in zip(sample.advantages, sample.loss_mask) if m}
    if len(values) != 1:
        raise ValueError(f"{sample.role} sample of group {sample.group} has {len(values)} different advantages on "
                         f"its trained tokens; a slime TEMPO sample carries one (per-token advantages: token_advantages=True)")
    return values.pop()


def _slime_sample(
    sample_cls: Any, group_index: int, index: int, tokens: Sequence[int], prompt_length: int,
    loss_mask: Sequence[int], logprobs: Sequence[float], reward: float, status: Any, metadata: dict,
    decode: Callable[[list[int]], str],
) -> Any:
    """A slime Sample of ``tokens`` whose response starts at ``prompt_length`` (per-token arrays
    are aligned with ``tokens``; slime keeps the response part of them)."""
    response = list(tokens[prompt_length:])
    return sample_cls(
        group_index=group_index,
        index=index,
        tokens=list(tokens),
        response=decode(response),
        response_length=len(response),
        loss_mask=list(loss_mask[prompt_length:]),
        rollout_log_probs=list(logprobs[prompt_length:]),
        reward=float(reward),
        status=status,
        metadata=metadata,
    )


def from_train_sample(
    sample: TrainSample,
    sample_cls: Any,
    index: int,
    decode: Callable[[list[int]], str],
    token_advantages: bool = False,
) -> Any:
    """``token_advantages``: Temporal GRPO (reward = the raw return, per-token advantages in the
    metadata); otherwise TEMPO (reward = the sample's advantage, raw return in the metadata)."""
    metadata: dict[str, Any] = {"tempo_role": sample.role}
    if token_advantages:
        metadata[TOKEN_ADVANTAGES] = [float(a) for a in sample.advantages[sample.prompt_length:]]
        reward = sample.reward
    else:
        metadata[RETURN] = sample.reward
        reward = sample_advantage(sample)
    return _slime_sample(
        sample_cls, 2 * sample.group + (0 if sample.role == ACTOR else 1), index, sample.tokens, sample.prompt_length,
        sample.loss_mask, sample.old_logprobs, reward, sample_cls.Status.COMPLETED, metadata, decode,
    )


def from_episode(branch: Branch, reward: float, sample_cls: Any, index: int, decode: Callable[[list[int]], str]) -> Any:
    """A complete episode from the game's first prompt; ``group_index`` = the branch's group."""
    truncated = branch.stop_reason in TRUNCATED_STOPS
    return _slime_sample(
        sample_cls, branch.group, index, branch.tokens, len(branch.start.token_prefix), branch.loss_mask,
        branch.logprobs, reward, sample_cls.Status.TRUNCATED if truncated else sample_cls.Status.COMPLETED,
        {"tempo_role": ACTOR, "stop_reason": branch.stop_reason, "won": branch.won,
         "unaccepted_actions": branch.unaccepted_actions}, decode,
    )


def padding_sample(sample_cls: Any, group_index: int, index: int, token_id: int, token_advantages: bool = False) -> Any:
    metadata: dict[str, Any] = {"tempo_role": PADDING}
    if token_advantages:
        metadata[TOKEN_ADVANTAGES] = [0.0]
    return sample_cls(
        group_index=group_index,
        index=index,
        tokens=[token_id, token_id],
        response="",
        response_length=1,
        loss_mask=[0],
        rollout_log_probs=[0.0],
        reward=0.0,
        remove_sample=True,
        status=sample_cls.Status.COMPLETED,
        metadata=metadata,
    )


def step_order(streams: Sequence[Sequence[T]]) -> list[T]:
    """The items of several streams in one sequence in which every prefix holds each stream's
    items in proportion to the stream's length, to within one item.

    slime cuts a rollout's samples into optimiser steps of ``--global-batch-size`` in list order, so
    with this order each step of a TD rollout holds actor and critic samples (and padding) in the
    rollout's proportions. Position k (1-based) of N takes the next item of the stream furthest
    behind its quota: the largest k T_s / N - placed_s over the streams with items left (ties: stream
    order). Unlike sorting by each item's share of its stream, two short streams of equal length do
    not land side by side, which could leave a whole step to the long one.
    """
    total = sum(len(stream) for stream in streams)
    placed = [0] * len(streams)
    order: list[T] = []
    for k in range(1, total + 1):
        # integer deficits, k T_s - placed_s N (= N x the fractional deficit): exact ties
        s = max((i for i, stream in enumerate(streams) if placed[i] < len(stream)),
                key=lambda i: (k * len(streams[i]) - placed[i] * total, -i))
        order.append(streams[s][placed[s]])
        placed[s] += 1
    return order


def slime_groups(
    samples: Sequence[TrainSample],
    count: int,
    sample_cls: Any,
    decode: Callable[[list[int]], str],
    pad_token_id: int,
    first_index: int = 0,
    token_advantages: bool = False,
) -> list[list[Any]]:
    """Exactly ``count`` slime samples: the update's and padding samples (one group,
    ``remove_sample=True``) to fill the count, in ``step_order`` of three streams: actor samples,
    critic samples, padding (each stream in the update's order); a run of consecutive samples of one
    ``group_index`` is one list. ``index`` counts up in that order from ``first_index``.
    ``token_advantages`` puts each sample's per-token advantages in its metadata (Temporal GRPO)."""
    if len(samples) > count:
        raise RuntimeError(f"the update produced {len(samples)} samples, more than the fixed layout of {count}")
    converted = [from_train_sample(sample, sample_cls, 0, decode, token_advantages) for sample in samples]
    padding_group = max((c.group_index for c in converted), default=-1) + 1
    streams = [
        [c for c in converted if c.metadata["tempo_role"] == ACTOR],
        [c for c in converted if c.metadata["tempo_role"] != ACTOR],
        [padding_sample(sample_cls, padding_group, 0, pad_token_id, token_advantages) for _ in range(count - len(samples))],
    ]
    ordered = step_order(streams)
    for index, sample in enumerate(ordered):
        sample.index = first_index + index
    return [list(run) for _, run in itertools.groupby(ordered, key=lambda sample: sample.group_index)]

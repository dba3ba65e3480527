"""TEMPO's training samples and episodes as slime ``Sample``s.

A slime sample is ``tokens = prompt + response`` with ``response_length`` tokens after the prompt;
``loss_mask`` and ``rollout_log_probs`` cover the response only. Here:

- actor branch: prompt = the saved token prefix of the start state (earlier rounds get no loss),
  response = the H-round segment; mask 1 on the actor's sampled tokens, 0 on observations and
  turn tokens; log-probs from the sampler, 0 where the mask is 0.
- critic sample: prompt = the critic prompt, response = the sampled completion (all trained).
- ``reward`` = the raw return R_n (actor) or the raw critic reward r_k, and the reward post-process
  centres it per ``group_index`` (actor group of start state g: 2g; its critic group: 2g + 1).
- padding: a two-token sample with ``remove_sample=True`` (slime zeroes its loss mask) and its own
  group, so a rollout always returns the same number of samples.

The ``Sample`` class is passed in: slime's own at run time, a stand-in with the same fields in
tests where slime is not installed.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tempo_plugin.rollout.engine import Branch
from tempo_plugin.rollout.samples import ACTOR, TrainSample

PADDING = "padding"
TRUNCATED_STOPS = ("trajectory_too_long",)


def from_train_sample(sample: TrainSample, sample_cls: Any, index: int, decode: Callable[[list[int]], str]) -> Any:
    start = sample.prompt_length
    response = list(sample.tokens[start:])
    return sample_cls(
        group_index=2 * sample.group + (0 if sample.role == ACTOR else 1),
        index=index,
        tokens=list(sample.tokens),
        response=decode(response),
        response_length=len(response),
        loss_mask=list(sample.loss_mask[start:]),
        rollout_log_probs=list(sample.old_logprobs[start:]),
        reward=float(sample.reward),
        status=sample_cls.Status.COMPLETED,
        metadata={"tempo_role": sample.role},
    )


def from_episode(branch: Branch, reward: float, sample_cls: Any, index: int, decode: Callable[[list[int]], str]) -> Any:
    """A complete episode from the game's first prompt; ``group_index`` = the branch's group."""
    start = len(branch.start.token_prefix)
    response = list(branch.tokens[start:])
    truncated = branch.stop_reason in TRUNCATED_STOPS
    return sample_cls(
        group_index=branch.group,
        index=index,
        tokens=list(branch.tokens),
        response=decode(response),
        response_length=len(response),
        loss_mask=list(branch.loss_mask[start:]),
        rollout_log_probs=list(branch.logprobs[start:]),
        reward=float(reward),
        status=sample_cls.Status.TRUNCATED if truncated else sample_cls.Status.COMPLETED,
        metadata={"tempo_role": ACTOR, "stop_reason": branch.stop_reason},
    )


def padding_sample(sample_cls: Any, group_index: int, index: int, token_id: int) -> Any:
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
        metadata={"tempo_role": PADDING},
    )


def slime_groups(
    samples: Sequence[TrainSample],
    count: int,
    sample_cls: Any,
    decode: Callable[[list[int]], str],
    pad_token_id: int,
    first_index: int = 0,
) -> list[list[Any]]:
    """Exactly ``count`` slime samples grouped by ``group_index``: the update's, then padding."""
    if len(samples) > count:
        raise RuntimeError(f"the update produced {len(samples)} samples, more than the fixed layout of {count}")
    groups: dict[int, list[Any]] = {}
    for i, sample in enumerate(samples):
        converted = from_train_sample(sample, sample_cls, first_index + i, decode)
        groups.setdefault(converted.group_index, []).append(converted)
    first_padding_group = max(groups, default=-1) + 1
    padding = [
        padding_sample(sample_cls, first_padding_group + j, first_index + len(samples) + j, pad_token_id)
        for j in range(count - len(samples))
    ]
    return list(groups.values()) + ([padding] if padding else [])

"""MacroState: everything needed to resume an episode at a macro-step boundary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MacroState:
    """A resumable mid-episode state.

    Environment side: ``env_seed`` + ``action_history`` (replay) and ``snapshot`` (O(1) restore
    where the environment supports it); ``observation`` is what the environment must show after
    restoring, compared character by character. Token side: ``token_prefix`` is the exact token
    sequence of the next actor prompt. ``prefix_logprob_sum`` is the sum of the sampler log-probs of
    the assistant tokens in ``token_prefix``, which lie at ``assistant_spans`` ([start, end) index
    ranges, one per sampled completion), for the prefix importance correction; the last of them was
    sampled in update ``policy_version``. A fresh game has no assistant tokens: sum 0, no spans.
    """

    env_seed: int
    task: str
    action_history: tuple[str, ...]
    observation: str
    privileged_info: str
    token_prefix: tuple[int, ...]
    messages: tuple[tuple[str, str], ...]
    round_index: int
    macro_index: int
    snapshot: Any = None
    prefix_logprob_sum: float = 0.0
    policy_version: int = 0
    assistant_spans: tuple[tuple[int, int], ...] = ()
    milestones_left: int | None = None  # envs.base.milestones_left here (None: the environment has no milestones)

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]

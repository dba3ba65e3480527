"""Chat protocol between the actor and an environment, in tokens.

The actor's prompt is extended strictly: next prompt = previous prompt + the *sampled* completion
tokens + the assistant-closing tokens (minus what the completion already ends with) + the rendered
tokens of the next user turn carrying the observation. History is never re-tokenised, so the token
prefix the policy was sampled on is exactly the prefix it is trained on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

ACTOR_SYSTEM_PROMPT = (
    "You play a text game. Each turn, reply with exactly one admissible action as "
    "<action>your action</action>."
)
INVALID_ACTION = "__invalid__"
_ACTION_RE = re.compile(r"<action>([^\n<>]*)</action>\s*$", re.IGNORECASE)
_PROBE_USER = "PROBEUSER"
_PROBE_ASSISTANT = "PROBEASSISTANT"


class PrefixViolation(RuntimeError):
    """A token sequence does not extend the prefix it was built from."""


def parse_action(text: str) -> str:
    """The action in a final ``<action>...</action>`` tag (canonicalised), else ``INVALID_ACTION``."""
    match = _ACTION_RE.search(text.strip())
    if not match:
        return INVALID_ACTION
    action = " ".join(match.group(1).lower().split())
    return action or INVALID_ACTION


def format_action(action: str) -> str:
    return f"<action>{action}</action>"


def check_extends(prefix: Sequence[int], sequence: Sequence[int]) -> None:
    """Raise PrefixViolation unless ``sequence`` starts with ``prefix``."""
    if len(sequence) < len(prefix) or list(sequence[: len(prefix)]) != list(prefix):
        raise PrefixViolation(
            f"token sequence of length {len(sequence)} does not extend its prefix of length {len(prefix)}"
        )


@dataclass
class ChatProtocol:
    """Renders prompts with the tokenizer's chat template and extends them token by token."""

    tokenizer: Any

    def __post_init__(self) -> None:
        # The tokens between turns are read from a render where the assistant turns are NOT the last
        # message: templates such as Qwen3's render the last assistant turn differently (a
        # <think></think> block) from a history turn, and a history turn is what the prompt grows by.
        u1, a1, u2, a2, u3 = (f"{_PROBE_USER}1", f"{_PROBE_ASSISTANT}1", f"{_PROBE_USER}2", f"{_PROBE_ASSISTANT}2", f"{_PROBE_USER}3")
        history = [{"role": "user", "content": u1}, {"role": "assistant", "content": a1},
                   {"role": "user", "content": u2}, {"role": "assistant", "content": a2}]
        rendered = self._render(history + [{"role": "user", "content": u3}], add_generation_prompt=True)
        markers = (u1, a1, u2, a2, u3)
        if any(rendered.count(m) != 1 for m in markers) or sorted(markers, key=rendered.index) != list(markers):
            raise ValueError("the tokenizer's chat template does not render every user and assistant turn in order")
        between = rendered[rendered.index(a2) + len(a2):rendered.index(u3)]  # assistant closing + next user header
        if rendered[rendered.index(a1) + len(a1):rendered.index(u2)] != between:
            raise ValueError("the tokenizer's chat template renders the boundary after an assistant turn differently per turn")
        self._turn_tail = rendered[rendered.index(u3) + len(u3):]  # user closing + assistant header (generation prompt)
        # Split ``between`` where the assistant message ends: its closing as the template renders a final
        # assistant turn, when ``between`` starts with it (else all of it counts as closing).
        closed = self._render(history[:2], add_generation_prompt=False)
        last_closing = closed[closed.rindex(a1) + len(a1):] if a1 in closed else ""
        closing_text = last_closing if last_closing and between.startswith(last_closing) else between
        self._turn_head = between[len(closing_text):]
        self.closing_ids: list[int] = self.encode(closing_text)
        stop = {self.tokenizer.eos_token_id}
        for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id and token_id >= 0:
                stop.add(token_id)
        self.stop_token_ids: tuple[int, ...] = tuple(sorted(t for t in stop if t is not None))

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, enable_thinking=False
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def initial_messages(self, task: str, observation: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": ACTOR_SYSTEM_PROMPT},
            {"role": "user", "content": f"Task: {task}\n{observation}"},
        ]

    def render_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a fresh prompt ending with the assistant header."""
        return self.encode(self._render(messages, add_generation_prompt=True))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def closing_tokens(self, completion_ids: Sequence[int]) -> list[int]:
        """Assistant-closing tokens minus the longest overlap with the completion's tail."""
        closing = self.closing_ids
        for overlap in range(min(len(closing), len(completion_ids)), 0, -1):
            if list(completion_ids[-overlap:]) == closing[:overlap]:
                return closing[overlap:]
        return list(closing)

    def observation_tokens(self, observation: str) -> list[int]:
        """The rendered user turn carrying an observation, ending with the next assistant header."""
        return self.encode(self._turn_head + observation + self._turn_tail)

    def extend(self, prompt: Sequence[int], completion_ids: Sequence[int], observation: str) -> tuple[list[int], int]:
        """Next prompt after one round, and the index where the completion's context tail starts."""
        completion_end = len(prompt) + len(completion_ids)
        next_prompt = list(prompt) + list(completion_ids)
        next_prompt += self.closing_tokens(completion_ids) + self.observation_tokens(observation)
        check_extends(prompt, next_prompt)
        return next_prompt, completion_end

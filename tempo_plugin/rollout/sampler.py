"""The Sampler contract shared by the local runtime and the slime (SGLang) runtime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Request:
    prompt_ids: Sequence[int]
    max_new_tokens: int


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]
    logprobs: list[float]  # sampler log-prob of each generated token
    text: str
    finish_reason: str  # "stop" (a stop token was generated, and is included) or "length"


class Sampler(Protocol):
    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        """One completion per request, in request order. Repeat a request N times to fork N branches."""
        ...


class PromptScorer(Protocol):
    """What the prefix importance correction (``--prefix-is-clip``) needs besides ``generate``."""

    def prompt_logprobs(self, prompts: Sequence[Sequence[int]], temperature: float) -> list[list[float]]:
        """Per prompt, the log-prob of each token given the ones before it, under the same
        (temperature-scaled) distribution ``generate`` samples from; entry 0 is 0.0."""
        ...


class AnswerScorer(Protocol):
    """What the expected-value critic readout (``--critic-value expected``) needs besides ``generate``."""

    def answer_logprobs(self, prompt: Sequence[int], answers: Sequence[Sequence[int]]) -> list[float]:
        """log pi(answer | prompt) of each answer, summed over its tokens, at temperature 1."""
        ...

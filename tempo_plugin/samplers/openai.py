"""A Sampler over an OpenAI-style ``/v1/completions`` endpoint (vLLM, SGLang's OpenAI API, ...).

Token ids go in (``prompt`` is the list of prompt token ids, which vLLM and SGLang accept), text
comes out: the completion's ``token_ids`` are the text re-encoded with the tokenizer and its
``logprobs`` are zeros, so completions from this sampler are for evaluation, not for training.
When the server stops on a stop token, that token is not in the returned text (so not in
``token_ids``); ``ChatProtocol.extend`` appends the assistant closing either way.

Each request is sent with ``n: 1`` and its own ``seed`` (derived from the call's seed and the
request's position), so N copies of one prompt give N different samples. A temperature at or below
``greedy_below`` is sent as 0 (greedy decoding, which every OpenAI-style server accepts). Only the
standard library is used; requests go out through the SGLang sampler's ``request_json`` (no
proxy; retried a few times when they cannot have started a generation, a connection refused or a
5xx answer; a 4xx answer, a timeout or a malformed answer raises ``OpenAIError`` at once, with a
one-line message).
"""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from tempo_plugin.samplers.sglang_http import request_json
from tempo_plugin.rollout.games import request_seed
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams


class OpenAIError(RuntimeError):
    """The server did not return a usable completion (a one-line message)."""


def api_base(url: str) -> str:
    """``http://host:port/v1`` from the server's address, its ``/v1`` or its ``/v1/completions``."""
    base = url.strip().rstrip("/")
    for tail in ("/completions", "/v1"):
        if base.endswith(tail):
            base = base[: -len(tail)]
    return base + "/v1"


@dataclass
class OpenAISampler:
    url: str  # the server (http://host:port), its /v1 or its /v1/completions
    model: str  # the "model" field of every request (see ``list_models``)
    tokenizer: Any  # re-encodes the returned text into token ids
    max_workers: int = 64
    timeout_s: float = 600.0
    max_retries: int = 3
    retry_delay_s: float = 1.0
    greedy_below: float = 1e-4  # temperatures <= this are sent as 0 (greedy)

    @property
    def completions_url(self) -> str:
        return api_base(self.url) + "/completions"

    def _open(self, request: urllib.request.Request) -> Any:
        return request_json(request, self.timeout_s, self.max_retries, self.retry_delay_s, OpenAIError)

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.completions_url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        return self._open(request)

    def list_models(self) -> list[str]:
        """The model ids the server offers (``GET /v1/models``)."""
        answer = self._open(urllib.request.Request(api_base(self.url) + "/models"))
        try:
            return [str(m["id"]) for m in answer["data"]]
        except (KeyError, TypeError) as error:
            raise OpenAIError(f"{api_base(self.url)}/models: unexpected answer (no data[].id: {error!r})") from None

    def payload(self, request: Request, params: SamplingParams, seed: int) -> dict[str, Any]:
        temperature = 0.0 if params.temperature <= self.greedy_below else params.temperature
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(t) for t in request.prompt_ids],
            "max_tokens": int(request.max_new_tokens),
            "temperature": temperature,
            "top_p": params.top_p,
            "n": 1,
            "seed": seed,
        }
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        return body

    def completion(self, answer: dict[str, Any]) -> Completion:
        try:
            choice = answer["choices"][0]
            text = choice["text"]
            if not isinstance(text, str):
                raise TypeError(text)
        except (KeyError, IndexError, TypeError):
            raise OpenAIError(f"{self.completions_url}: answer without choices[0].text: {str(answer)[:200]}") from None
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        token_ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        return Completion(token_ids=token_ids, logprobs=[0.0] * len(token_ids), text=text, finish_reason=finish)

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        def one(indexed: tuple[int, Request]) -> Completion:
            index, request = indexed
            return self.completion(self._post(self.payload(request, params, request_seed(seed, index))))

        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(requests))) as pool:
            return list(pool.map(one, enumerate(requests)))

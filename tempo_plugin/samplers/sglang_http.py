"""A Sampler over an SGLang(-compatible) ``/generate`` endpoint: token-in, log-probs out.

One HTTP request per completion, sent concurrently (as slime's own rollout does through the
router). Token ids and log-probs are taken from ``meta_info.output_token_logprobs``, never from
re-tokenised text. A request the server aborts raises, so the caller can drop the update.

Like slime's own client (``slime.utils.http_utils``, ``trust_env=False``) the sampler never goes
through an HTTP proxy: ``http_proxy`` / ``https_proxy`` in the environment are ignored, since the
router is cluster-internal. A request is sent again only when it cannot have started a generation
(the connection failed, or the server answered 5xx); after a timeout the generation may still be
running on the server, so the sampler raises instead of sending it a second time.

With ``seed_requests`` (slime's ``--sglang-enable-deterministic-inference``, the flag under which
slime's own rollout seeds its requests) every request carries ``sampling_params.sampling_seed``,
derived from the call's seed (``sampling_seed``: the run's ``--seed``, the update, the stream) and
the request's index (``rollout.games.request_seed``), so a run's sampling is fixed by its seed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from tempo_plugin.rollout.games import request_seed
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams


class GenerationError(RuntimeError):
    """The server did not return a usable completion."""


def completion_from_sglang(output: dict[str, Any]) -> Completion:
    meta = output.get("meta_info") or {}
    triples = meta.get("output_token_logprobs")
    finish = (meta.get("finish_reason") or {}).get("type")
    if finish == "abort":
        raise GenerationError("the server aborted the request")
    if triples is None:
        raise GenerationError("response has no meta_info.output_token_logprobs: was return_logprob sent?")
    if finish not in ("stop", "length"):
        raise GenerationError(f"unexpected finish_reason {finish!r}")
    return Completion(
        token_ids=[int(t[1]) for t in triples],
        logprobs=[float(t[0]) for t in triples],
        text=str(output.get("text", "")),
        finish_reason=finish,
    )


NO_HEALTH_ROUTE = frozenset({404, 405, 501})
"""Answers of a server that has no ``/health`` route (an OpenAI endpoint, a test stub): it is up."""


def answers_health(base_url: str, timeout_s: float) -> bool:
    """Whether ``<base_url>/health`` answers (SGLang's engine and router both serve it): False when
    nothing answers, or it answers 5xx (an engine still loading or dying)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base_url}/health", timeout=timeout_s):
            return True
    except urllib.error.HTTPError as error:
        return error.code in NO_HEALTH_ROUTE or error.code < 500
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def base_of(url: str) -> str:
    """``scheme://host:port`` of a URL."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def request_json(request: urllib.request.Request, timeout_s: float, max_retries: int, retry_delay_s: float,
                 error_type: type[Exception], health_timeout_s: float = 0.0) -> Any:
    """The JSON answer to ``request``, never through a proxy. Sent again only when it cannot have
    started a generation (the connection failed, or a 5xx answer), at most ``max_retries`` times;
    a 4xx answer, a timeout or an answer that is not JSON raises ``error_type`` at once, one line.
    With ``health_timeout_s`` each failure also asks the server's ``/health``: a server that has
    not answered it for that long is dead, and raises naming it instead of waiting out the retries
    (a live server that answers 5xx, e.g. one restarting an engine, keeps its retries)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy, whatever the environment says
    url = request.full_url
    problem = ""
    unhealthy_since: float | None = None
    for attempt in range(max_retries + 1):
        try:
            with opener.open(request, timeout=timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read()[:200].decode("utf-8", "replace").replace("\n", " ")
            problem = f"{url} answered {error.code}: {detail}"
            if error.code < 500:
                raise error_type(problem) from None
        except json.JSONDecodeError as error:
            raise error_type(f"{url} answered with something that is not JSON ({error})") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(error, TimeoutError) or isinstance(reason, TimeoutError):
                raise error_type(f"{url} gave no answer within {timeout_s:g} s (not re-sent: "
                                 "the generation may still be running)") from None
            problem = f"{url} unreachable: {reason}"
        if health_timeout_s > 0:
            base = base_of(url)
            if answers_health(base, min(2.0, health_timeout_s)):
                unhealthy_since = None
            else:
                now = time.monotonic()
                unhealthy_since = now if unhealthy_since is None else unhealthy_since
                if now - unhealthy_since >= health_timeout_s:
                    raise error_type(f"the SGLang server at {base} is down: {problem}, and {base}/health has not "
                                     f"answered for {now - unhealthy_since:.0f} s; see that engine's (or router's) log")
        if attempt < max_retries:
            time.sleep(retry_delay_s)
    raise error_type(f"{problem} (gave up after {max_retries} retries)")


@dataclass
class HTTPSampler:
    url: str  # e.g. http://127.0.0.1:30000/generate
    max_workers: int = 64
    timeout_s: float = 600.0
    max_retries: int = 60  # as slime's own http_utils.post: transient failures are retried ...
    retry_delay_s: float = 1.0  # ... this many seconds apart, ...
    health_timeout_s: float = 30.0  # ... unless /health has not answered for this long (slime: --rollout-health-check-timeout)
    seed_requests: bool = False  # send sampling_params.sampling_seed (SGLang deterministic inference)

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        return request_json(request, self.timeout_s, self.max_retries, self.retry_delay_s, GenerationError,
                            self.health_timeout_s)

    def prompt_logprobs(self, prompts: Sequence[Sequence[int]], temperature: float) -> list[list[float]]:
        """Each prompt's token log-probs from the server (``rollout.sampler.PromptScorer``): SGLang
        scores a prompt given ``max_new_tokens`` 0, ``return_logprob`` and ``logprob_start_len`` 0,
        answering ``meta_info.input_token_logprobs`` (None for the first token, here 0.0). The same
        engine that sampled the tokens, as the prefix importance correction needs."""
        def one(prompt: Sequence[int]) -> list[float]:
            payload = {
                "input_ids": list(prompt),
                "sampling_params": {"temperature": temperature, "max_new_tokens": 0},
                "return_logprob": True,
                "logprob_start_len": 0,
            }
            triples = (self._post(payload).get("meta_info") or {}).get("input_token_logprobs")
            if not isinstance(triples, list) or len(triples) != len(prompt):
                raise GenerationError(f"scoring a {len(prompt)}-token prompt: meta_info.input_token_logprobs has "
                                      f"{len(triples) if isinstance(triples, list) else 'no'} entries")
            return [0.0 if t[0] is None else float(t[0]) for t in triples]

        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(prompts))) as pool:
            return list(pool.map(one, prompts))

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        def one(indexed: tuple[int, Request]) -> Completion:
            index, request = indexed
            payload: dict[str, Any] = {
                "input_ids": list(request.prompt_ids),
                "sampling_params": {
                    "temperature": params.temperature,
                    "top_p": params.top_p,
                    "max_new_tokens": request.max_new_tokens,
                    "stop_token_ids": list(params.stop_token_ids),
                    "skip_special_tokens": True,
                    "no_stop_trim": True,
                },
                "return_logprob": True,
            }
            if self.seed_requests:
                payload["sampling_params"]["sampling_seed"] = request_seed(seed, index)
            return completion_from_sglang(self._post(payload))

        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(requests))) as pool:
            return list(pool.map(one, enumerate(requests)))

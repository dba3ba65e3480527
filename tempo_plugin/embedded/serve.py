"""An SGLang-compatible ``/generate`` server over the local runtime (loopback by default).

    python -m tempo_plugin.embedded.serve --model DIR [--host 127.0.0.1] [--port 30000]

It serves the subset of SGLang's native API that slime's rollout uses: POST ``/generate`` with
token-in ``input_ids`` (one list, or a list of lists), ``sampling_params`` (temperature, top_p,
max_new_tokens, stop_token_ids) and ``return_logprob``; the answer carries ``text``, ``output_ids``
and ``meta_info`` with ``output_token_logprobs`` ([logprob, token_id, None] per token),
``finish_reason.type`` (stop or length), ``prompt_tokens`` and ``completion_tokens``. With
``logprob_start_len`` (0) and ``max_new_tokens`` 0 it scores the prompt instead, as SGLang does:
``meta_info.input_token_logprobs`` has [logprob, token_id, None] per prompt token, None for the first. ``GET
/health`` answers 200. Requests that arrive together are batched into one sampler call, so
concurrent branches share a forward pass (and the sampler's kept KV cache).

What slime asks of an external engine (``--rollout-external-engine-addrs``) besides ``/generate``:
``GET /server_info`` (also ``/get_server_info``, SGLang's older name) describes the engine: one
GPU-free engine without tensor, pipeline or data parallelism and without the memory saver (slime
compares ``enable_memory_saver`` with its own setting); ``GET /model_info`` names the model. When
slime is pointed at this server as its router too (``--sglang-router-ip/--sglang-router-port``),
it registers its engines with ``POST /workers`` (``{"url": ..., "worker_type": ...}``); the server
records them (``GET /workers`` lists them) and keeps serving every request itself.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tempo_plugin.rollout.sampler import Completion, Request, Sampler, SamplingParams

BATCH_WINDOW_S = 0.005


@dataclass
class _Job:
    request: Request
    params: SamplingParams
    future: Future
    score: bool = False  # the prompt's token log-probs (prompt_logprobs) instead of a completion


class BatchingWorker:
    """One thread owns the sampler; jobs with equal sampling params that arrive within a few
    milliseconds of each other run as one batch."""

    def __init__(self, sampler: Sampler, seed: int = 0) -> None:
        self.sampler = sampler
        self._jobs: queue.Queue[_Job] = queue.Queue()
        self._calls = seed
        threading.Thread(target=self._run, daemon=True).start()

    def submit(self, request: Request, params: SamplingParams, score: bool = False) -> Future:
        future: Future = Future()
        self._jobs.put(_Job(request, params, future, score))
        return future

    def _score(self, jobs: list[_Job]) -> None:
        for job in jobs:
            try:
                job.future.set_result(self.sampler.prompt_logprobs([job.request.prompt_ids], job.params.temperature)[0])
            except Exception as error:
                job.future.set_exception(error)

    def _run(self) -> None:
        while True:
            batch = [self._jobs.get()]
            while True:
                try:
                    batch.append(self._jobs.get(timeout=BATCH_WINDOW_S))
                except queue.Empty:
                    break
            self._score([job for job in batch if job.score])
            by_params: dict[SamplingParams, list[_Job]] = {}
            for job in batch:
                if not job.score:
                    by_params.setdefault(job.params, []).append(job)
            for params, jobs in by_params.items():
                self._calls += 1
                try:
                    completions = self.sampler.generate([j.request for j in jobs], params, seed=self._calls)
                except Exception as error:  # the worker lives on
                    if len(jobs) == 1:
                        jobs[0].future.set_exception(error)
                        continue
                    # one job may have failed them all: run each alone, so only the failing ones fail
                    for job in jobs:
                        self._calls += 1
                        try:
                            job.future.set_result(self.sampler.generate([job.request], params, seed=self._calls)[0])
                        except Exception as single_error:
                            job.future.set_exception(single_error)
                    continue
                for job, completion in zip(jobs, completions):
                    job.future.set_result(completion)


def sglang_scored(prompt: list[int], logprobs: list[float]) -> dict[str, Any]:
    """SGLang's answer to a scoring request: no completion, the prompt's token log-probs."""
    return {
        "text": "",
        "output_ids": [],
        "meta_info": {
            "input_token_logprobs": [[None if i == 0 else lp, tok, None] for i, (lp, tok) in enumerate(zip(logprobs, prompt))],
            "output_token_logprobs": [],
            "finish_reason": {"type": "length"},
            "prompt_tokens": len(prompt),
            "completion_tokens": 0,
        },
    }


def sglang_response(completion: Completion, prompt_tokens: int) -> dict[str, Any]:
    return {
        "text": completion.text,
        "output_ids": completion.token_ids,
        "meta_info": {
            "output_token_logprobs": [[lp, tok, None] for lp, tok in zip(completion.logprobs, completion.token_ids)],
            "finish_reason": {"type": completion.finish_reason},
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(completion.token_ids),
        },
    }


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for; beyond it the answer is a 4xx, before any work is done."""

    max_body_bytes: int = 16 * 1024 * 1024
    max_prompts: int = 256  # prompts in one batched request
    max_prompt_tokens: int = 32768
    max_new_tokens: int = 4096
    vocab_size: int | None = None  # token ids must be in [0, vocab_size) when known
    read_timeout_s: float = 30.0  # a client that stops sending mid-request is dropped after this


class BadRequest(ValueError):
    """A malformed or out-of-limits request: answered 4xx with the message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _number(sampling: dict[str, Any], key: str, default: float) -> float:
    value = sampling.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"sampling_params.{key} must be a finite number (got {value!r})")
    return float(value)


def _token_ids(ids: Any, what: str, limits: ServerLimits) -> list[int]:
    if not isinstance(ids, list) or not ids:
        raise BadRequest(f"{what} must be a non-empty list of token ids")
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (limits.vocab_size is not None and t >= limits.vocab_size):
            bound = f" and below the vocabulary size {limits.vocab_size}" if limits.vocab_size is not None else ""
            raise BadRequest(f"{what} holds {t!r}: token ids are integers >= 0{bound}")
    return ids


def parse_generate(payload: Any, limits: ServerLimits = ServerLimits()) -> tuple[list[list[int]], SamplingParams, int, bool]:
    """(prompts, params, max_new_tokens, batched) from a /generate body; BadRequest if malformed.
    max_new_tokens 0 means: score the prompts (only with logprob_start_len 0 and return_logprob)."""
    if not isinstance(payload, dict):
        raise BadRequest(f"the body must be a JSON object, not {type(payload).__name__}")
    ids = payload.get("input_ids")
    if not isinstance(ids, list) or not ids:
        raise BadRequest("input_ids (a list of token ids, or a list of such lists) is required")
    batched = isinstance(ids[0], list)
    prompts = ids if batched else [ids]
    if len(prompts) > limits.max_prompts:
        raise BadRequest(f"{len(prompts)} prompts in one request; at most {limits.max_prompts}", 413)
    for i, prompt in enumerate(prompts):
        _token_ids(prompt, f"input_ids[{i}]" if batched else "input_ids", limits)
        if len(prompt) > limits.max_prompt_tokens:
            raise BadRequest(f"a prompt of {len(prompt)} tokens; at most {limits.max_prompt_tokens}", 413)
    sampling = payload.get("sampling_params", {})
    if sampling is None:
        sampling = {}
    if not isinstance(sampling, dict):
        raise BadRequest(f"sampling_params must be a JSON object, not {type(sampling).__name__}")
    temperature, top_p = _number(sampling, "temperature", 1.0), _number(sampling, "top_p", 1.0)
    if temperature <= 0:
        raise BadRequest("sampling_params.temperature must be > 0 (greedy decoding is not served)")
    if not 0 < top_p <= 1:
        raise BadRequest(f"sampling_params.top_p must be in (0, 1] (got {top_p})")
    stops = sampling.get("stop_token_ids") or []
    params = SamplingParams(temperature, top_p, tuple(sorted(set(_token_ids(stops, "stop_token_ids", limits))) if stops else ()))
    max_new_tokens = sampling.get("max_new_tokens", 128)
    start = payload.get("logprob_start_len")
    scoring = max_new_tokens == 0 and start is not None
    if scoring and (isinstance(start, bool) or start != 0 or payload.get("return_logprob") is not True):
        raise BadRequest("scoring a prompt (max_new_tokens 0) needs return_logprob true and logprob_start_len 0")
    if not scoring and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                        or not 1 <= max_new_tokens <= limits.max_new_tokens):
        raise BadRequest(f"sampling_params.max_new_tokens must be an integer in [1, {limits.max_new_tokens}], "
                         f"or 0 with logprob_start_len 0 to score the prompt (got {max_new_tokens!r})")
    return prompts, params, max_new_tokens, batched


def vocab_size_of(sampler: Sampler) -> int | None:
    """The number of token ids the sampler's model accepts, when it has a local model."""
    model = getattr(sampler, "model", None)
    embeddings = model.get_input_embeddings() if model is not None and hasattr(model, "get_input_embeddings") else None
    return int(embeddings.num_embeddings) if embeddings is not None else None


def server_info(model_path: str) -> dict[str, Any]:
    """The ``/server_info`` answer: the SGLang ServerArgs fields slime reads of an external engine."""
    return {
        "model_path": model_path,
        "tp_size": 1,
        "pp_size": 1,
        "dp_size": 1,
        "ep_size": 1,
        "num_gpus": 1,  # slime counts one rollout "GPU" per engine; this one runs wherever it was started
        "enable_memory_saver": False,
        "disaggregation_mode": "null",
    }


MAX_WORKERS = 64
"""Registrations ``POST /workers`` keeps (slime registers one per engine); more are refused 400."""


def parse_worker(payload: Any) -> dict[str, str]:
    """A ``POST /workers`` body (a router registration): {"url": "http://...", "worker_type"?: str}."""
    if not isinstance(payload, dict):
        raise BadRequest(f"the body must be a JSON object, not {type(payload).__name__}")
    url = payload.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise BadRequest(f"url must be an http(s) URL string (got {url!r})")
    worker_type = payload.get("worker_type", "regular")
    if worker_type != "regular":
        raise BadRequest(f"worker_type {worker_type!r}: this server serves regular workers only (no prefill/decode split)")
    return {"url": url, "worker_type": worker_type}


def make_server(sampler: Sampler, host: str = "127.0.0.1", port: int = 30000, stop_token_ids: tuple[int, ...] = (),
                limits: ServerLimits | None = None, model_path: str = "") -> ThreadingHTTPServer:
    """A ready server (call ``serve_forever``); ``stop_token_ids`` are added to every request's.
    Every malformed request is answered 4xx with a one-line reason before it reaches the model.
    ``model_path`` is what ``/server_info`` and ``/model_info`` report."""
    limits = limits or ServerLimits(vocab_size=vocab_size_of(sampler))
    worker = BatchingWorker(sampler)
    workers: list[dict[str, str]] = []  # registered through POST /workers, in arrival order
    workers_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        timeout = limits.read_timeout_s  # socket timeout: a stalled client cannot hold a thread forever

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path in ("/health", "/health_generate"):
                self._send(200, {"status": "ok"})
            elif self.path in ("/server_info", "/get_server_info"):
                self._send(200, server_info(model_path))
            elif self.path in ("/model_info", "/get_model_info"):
                self._send(200, {"model_path": model_path, "tokenizer_path": model_path, "is_generation": True})
            elif self.path == "/workers":
                with workers_lock:
                    listed = [{"id": str(i), **w} for i, w in enumerate(workers)]
                self._send(200, {"workers": listed})
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def _body(self) -> Any:
            raw_length = self.headers.get("Content-Length")
            if raw_length is None:
                raise BadRequest("Content-Length is required", 411)
            try:
                length = int(raw_length)
            except ValueError:
                raise BadRequest(f"Content-Length must be an integer (got {raw_length!r})") from None
            if length < 0:
                raise BadRequest(f"Content-Length must be >= 0 (got {length})")
            if length > limits.max_body_bytes:
                raise BadRequest(f"a body of {length} bytes; at most {limits.max_body_bytes}", 413)
            data = self.rfile.read(length)
            if len(data) < length:
                raise BadRequest(f"the body ended after {len(data)} of {length} bytes")
            try:
                return json.loads(data or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise BadRequest(f"the body is not JSON: {error}") from None

        def _register(self) -> None:
            try:
                entry = parse_worker(self._body())
            except BadRequest as error:
                self.close_connection = True
                self._send(error.status, {"error": str(error)})
                return
            except TimeoutError:
                self.close_connection = True
                return
            with workers_lock:
                full = entry not in workers and len(workers) >= MAX_WORKERS
                if not full and entry not in workers:
                    workers.append(entry)
            if full:
                self._send(400, {"error": f"{MAX_WORKERS} workers are registered already; at most {MAX_WORKERS}"})
                return
            self._send(200, {"status": "ok", "url": entry["url"]})

        def do_POST(self) -> None:  # noqa: N802
            if self.path == "/workers":
                self._register()
                return
            if self.path != "/generate":
                self._send(404, {"error": f"no route {self.path}"})
                return
            try:
                prompts, params, max_new, batched = parse_generate(self._body(), limits)
            except BadRequest as error:
                self.close_connection = True  # the rest of a bad body is not read
                self._send(error.status, {"error": str(error)})
                return
            except TimeoutError:
                self.close_connection = True
                return
            params = SamplingParams(params.temperature, params.top_p,
                                    tuple(sorted(set(params.stop_token_ids) | set(stop_token_ids))))
            scoring = max_new == 0
            futures = [worker.submit(Request(p, max_new), params, score=scoring) for p in prompts]
            try:
                outputs = [sglang_scored(p, f.result()) if scoring else sglang_response(f.result(), len(p))
                           for f, p in zip(futures, prompts)]
            except Exception as error:  # a sampler failure is the server's fault
                self._send(500, {"error": f"generation failed: {type(error).__name__}: {error}"})
                return
            self._send(200, outputs if batched else outputs[0])

        def log_message(self, format: str, *args: Any) -> None:  # quiet by default
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    import torch

    from tempo_plugin.embedded.model import load_pretrained, resolve_device
    from tempo_plugin.samplers.local import LocalSampler
    from tempo_plugin.rollout.protocol import ChatProtocol

    parser = argparse.ArgumentParser(prog="python -m tempo_plugin.embedded.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local Hugging Face model directory (e.g. a run's checkpoints/latest)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    model, tokenizer = load_pretrained(args.model, resolve_device(args.device))
    server = make_server(LocalSampler(model, tokenizer), args.host, args.port, ChatProtocol(tokenizer).stop_token_ids,
                         model_path=args.model)
    print(f"serving {args.model} on http://{args.host}:{server.server_address[1]}/generate", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

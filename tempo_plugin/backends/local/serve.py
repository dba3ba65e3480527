"""An SGLang-compatible ``/generate`` server over the local runtime (loopback by default).

    python -m tempo_plugin.backends.local.serve --model DIR [--host 127.0.0.1] [--port 30000]

It serves the subset of SGLang's native API that slime's rollout uses: POST ``/generate`` with
token-in ``input_ids`` (one list, or a list of lists), ``sampling_params`` (temperature, top_p,
max_new_tokens, stop_token_ids) and ``return_logprob``; the answer carries ``text``, ``output_ids``
and ``meta_info`` with ``output_token_logprobs`` ([logprob, token_id, None] per token),
``finish_reason.type`` (stop or length), ``prompt_tokens`` and ``completion_tokens``. ``GET
/health`` answers 200. Requests that arrive together are batched into one sampler call, so
concurrent branches share a forward pass (and the sampler's kept KV cache).
"""

from __future__ import annotations

import argparse
import json
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


class BatchingWorker:
    """One thread owns the sampler; jobs with equal sampling params that arrive within a few
    milliseconds of each other run as one batch."""

    def __init__(self, sampler: Sampler, seed: int = 0) -> None:
        self.sampler = sampler
        self._jobs: queue.Queue[_Job] = queue.Queue()
        self._calls = seed
        threading.Thread(target=self._run, daemon=True).start()

    def submit(self, request: Request, params: SamplingParams) -> Future:
        future: Future = Future()
        self._jobs.put(_Job(request, params, future))
        return future

    def _run(self) -> None:
        while True:
            batch = [self._jobs.get()]
            while True:
                try:
                    batch.append(self._jobs.get(timeout=BATCH_WINDOW_S))
                except queue.Empty:
                    break
            by_params: dict[SamplingParams, list[_Job]] = {}
            for job in batch:
                by_params.setdefault(job.params, []).append(job)
            for params, jobs in by_params.items():
                self._calls += 1
                try:
                    completions = self.sampler.generate([j.request for j in jobs], params, seed=self._calls)
                except Exception as error:  # the client gets the error, the worker lives on
                    for job in jobs:
                        job.future.set_exception(error)
                    continue
                for job, completion in zip(jobs, completions):
                    job.future.set_result(completion)


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


def parse_generate(payload: dict[str, Any]) -> tuple[list[list[int]], SamplingParams, int, bool]:
    """(prompts, params, max_new_tokens, batched) from a /generate body; ValueError if malformed."""
    ids = payload.get("input_ids")
    if not isinstance(ids, list) or not ids:
        raise ValueError("input_ids (a list of token ids, or a list of such lists) is required")
    batched = isinstance(ids[0], list)
    prompts = ids if batched else [ids]
    if not all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompts):
        raise ValueError("input_ids must hold non-empty lists of integers")
    sampling = payload.get("sampling_params") or {}
    params = SamplingParams(
        temperature=float(sampling.get("temperature", 1.0)),
        top_p=float(sampling.get("top_p", 1.0)),
        stop_token_ids=tuple(sorted(int(t) for t in sampling.get("stop_token_ids") or ())),
    )
    if params.temperature <= 0:
        raise ValueError("temperature must be > 0 (greedy decoding is not served)")
    max_new_tokens = int(sampling.get("max_new_tokens", 128))
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    return prompts, params, max_new_tokens, batched


def make_server(sampler: Sampler, host: str = "127.0.0.1", port: int = 30000, stop_token_ids: tuple[int, ...] = ()) -> ThreadingHTTPServer:
    """A ready server (call ``serve_forever``); ``stop_token_ids`` are added to every request's."""
    worker = BatchingWorker(sampler)

    class Handler(BaseHTTPRequestHandler):
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
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/generate":
                self._send(404, {"error": f"no route {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length", 0))
                prompts, params, max_new, batched = parse_generate(json.loads(self.rfile.read(length) or b"{}"))
            except (ValueError, TypeError, json.JSONDecodeError) as error:
                self._send(400, {"error": str(error)})
                return
            params = SamplingParams(params.temperature, params.top_p,
                                    tuple(sorted(set(params.stop_token_ids) | set(stop_token_ids))))
            futures = [worker.submit(Request(p, max_new), params) for p in prompts]
            try:
                outputs = [sglang_response(f.result(), len(p)) for f, p in zip(futures, prompts)]
            except Exception as error:  # a sampler failure is the server's fault
                self._send(500, {"error": f"generation failed: {error}"})
                return
            self._send(200, outputs if batched else outputs[0])

        def log_message(self, format: str, *args: Any) -> None:  # quiet by default
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    import torch

    from tempo_plugin.backends.local.model import load_pretrained, resolve_device
    from tempo_plugin.backends.local.sampler import LocalSampler
    from tempo_plugin.rollout.protocol import ChatProtocol

    parser = argparse.ArgumentParser(prog="python -m tempo_plugin.backends.local.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local Hugging Face model directory (e.g. a run's checkpoints/latest)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    model, tokenizer = load_pretrained(args.model, resolve_device(args.device))
    server = make_server(LocalSampler(model, tokenizer), args.host, args.port, ChatProtocol(tokenizer).stop_token_ids)
    print(f"serving {args.model} on http://{args.host}:{server.server_address[1]}/generate", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

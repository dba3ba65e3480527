"""The /generate server under malformed requests and load: every bad request gets a fast 4xx with a
one-line reason, one client's bad request never fails another's, limits hold, nothing is lost."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tempo_plugin.embedded.serve import ServerLimits, make_server
from tempo_plugin.rollout.sampler import Completion

VOCAB = 100
POISON = 13  # the fake sampler fails any batch holding a prompt with this token (a bad request the checks let through)


class EchoSampler:
    """Deterministic answers: one token, (sum of the prompt) % 50 + 1, so every answer is checkable."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def generate(self, requests, params, seed):
        self.batches.append(len(requests))
        if any(POISON in r.prompt_ids for r in requests):
            raise RuntimeError("poisoned prompt")
        return [Completion([sum(r.prompt_ids) % 50 + 1], [-0.5], "x", "length") for r in requests]


@pytest.fixture()
def server():
    sampler = EchoSampler()
    limits = ServerLimits(max_body_bytes=4096, max_prompts=8, max_prompt_tokens=64, max_new_tokens=16,
                          vocab_size=VOCAB, read_timeout_s=1.0)
    srv = make_server(sampler, "127.0.0.1", 0, limits=limits)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], sampler
    srv.shutdown()
    srv.server_close()


def raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, dict]:
    """Send raw bytes, read the whole answer; (status, JSON body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post(port: int, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


def good(prompt: list[int], max_new: int = 4) -> bytes:
    return json.dumps({"input_ids": prompt, "sampling_params": {"max_new_tokens": max_new}, "return_logprob": True}).encode()


MALFORMED = [
    (b"[1, 2, 3]", 400, "must be a JSON object"),
    (b"not json", 400, "not JSON"),
    (json.dumps({"input_ids": [1, 2], "sampling_params": [0.5]}).encode(), 400, "sampling_params must be a JSON object"),
    (json.dumps({"input_ids": []}).encode(), 400, "input_ids"),
    (json.dumps({"input_ids": [[1], "a"]}).encode(), 400, "input_ids[1]"),
    (json.dumps({"input_ids": [1, VOCAB]}).encode(), 400, "vocabulary size 100"),
    (json.dumps({"input_ids": [1, -2]}).encode(), 400, "integers >= 0"),
    (json.dumps({"input_ids": [1, True]}).encode(), 400, "integers >= 0"),
    (json.dumps({"input_ids": [1, 2.5]}).encode(), 400, "integers >= 0"),
    (json.dumps({"input_ids": [1], "sampling_params": {"top_p": 0}}).encode(), 400, "top_p must be in (0, 1]"),
    (b'{"input_ids": [1], "sampling_params": {"temperature": NaN}}', 400, "temperature must be a finite number"),
    (json.dumps({"input_ids": [1], "sampling_params": {"temperature": 0}}).encode(), 400, "temperature must be > 0"),
    (json.dumps({"input_ids": [1], "sampling_params": {"temperature": "hot"}}).encode(), 400, "temperature must be a finite number"),
    (json.dumps({"input_ids": [1], "sampling_params": {"max_new_tokens": 10 ** 9}}).encode(), 400, "max_new_tokens must be an integer in [1, 16]"),
    (json.dumps({"input_ids": [1], "sampling_params": {"max_new_tokens": 0}}).encode(), 400, "max_new_tokens"),
    (json.dumps({"input_ids": [1], "sampling_params": {"stop_token_ids": [1, 500]}}).encode(), 400, "stop_token_ids"),
    (json.dumps({"input_ids": [[1]] * 9}).encode(), 413, "at most 8"),
    (json.dumps({"input_ids": [1] * 65}).encode(), 413, "at most 64"),
    (json.dumps({"input_ids": [1] * 2000}).encode(), 413, "at most 4096"),
]


@pytest.mark.parametrize("body, status, reason", MALFORMED)
def test_every_malformed_body_gets_a_fast_4xx_with_a_one_line_reason(server, body, status, reason):
    port, sampler = server
    tic = time.perf_counter()
    got_status, answer = post(port, body)
    assert (got_status, reason in answer["error"]) == (status, True), answer
    assert "\n" not in answer["error"]
    assert time.perf_counter() - tic < 2.0
    assert sampler.batches == []  # nothing reached the model


@pytest.mark.parametrize("header, status, reason", [
    (b"Content-Length: -1\r\n", 400, "Content-Length must be >= 0"),
    (b"Content-Length: ten\r\n", 400, "Content-Length must be an integer"),
    (b"", 411, "Content-Length is required"),
    (b"Content-Length: 99999999\r\n", 413, "at most 4096"),
])
def test_bad_content_length_is_answered_at_once(server, header, status, reason):
    port, _ = server
    tic = time.perf_counter()
    got, answer = raw(port, b"POST /generate HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n" + b'{"input_ids": [1]}')
    assert (got, reason in answer["error"]) == (status, True), answer
    assert time.perf_counter() - tic < 2.0


def test_a_body_shorter_than_announced_is_dropped_after_the_read_timeout(server):
    port, _ = server
    tic = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"input_ids\"")
        assert sock.recv(65536) == b""  # the server gave up on the connection
    assert time.perf_counter() - tic < 5.0
    assert post(port, good([1, 2]))[0] == 200  # and still serves


def test_a_failing_request_batched_with_good_ones_fails_alone(server):
    port, sampler = server
    prompts = [[1, 2], [3, POISON], [4, 5], [6]]
    with ThreadPoolExecutor(len(prompts)) as pool:  # arrive together: the worker batches them
        answers = list(pool.map(lambda p: post(port, good(p)), prompts))
    for prompt, (status, body) in zip(prompts, answers):
        if POISON in prompt:
            assert status == 500 and "poisoned prompt" in body["error"]
        else:
            assert status == 200 and body["output_ids"] == [sum(prompt) % 50 + 1]


def test_load_with_concurrent_good_and_bad_clients_loses_nothing(server):
    port, _ = server
    bad_bodies = [body for body, _, _ in MALFORMED]

    def client(k: int) -> list[tuple[str, bool]]:
        results = []
        for i in range(12):
            if (k + i) % 3 == 0:
                status, _ = post(port, bad_bodies[(k * 12 + i) % len(bad_bodies)])
                results.append(("bad", 400 <= status < 500))
            else:
                prompt = [(k * 7 + i * 3 + j) % 70 + 20 for j in range(1 + (k + i) % 5)]
                batched = i % 4 == 1
                status, body = post(port, json.dumps({"input_ids": [prompt, prompt[::-1]] if batched else prompt,
                                                      "sampling_params": {"max_new_tokens": 3}}).encode())
                expected = [sum(prompt) % 50 + 1]
                outputs = body if batched else [body]
                results.append(("good", status == 200 and all(o["output_ids"] == expected for o in outputs)))
        return results

    tic = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        results = [r for rs in pool.map(client, range(8)) for r in rs]
    assert len(results) == 96
    assert all(ok for _, ok in results), [r for r in results if not r[1]][:5]
    assert sum(kind == "good" for kind, _ in results) == 64
    assert time.perf_counter() - tic < 60

"""What slime asks of an external SGLang engine besides /generate, answered by our local server:
/server_info (and /get_server_info), /model_info, and the router's POST /workers registration."""

import json
import threading
import urllib.error
import urllib.request

import pytest

from tempo_plugin.embedded.serve import MAX_WORKERS, make_server
from tempo_plugin.rollout.sampler import Completion


class EchoSampler:
    """Answers every request with one token (the prompt's last), log-prob -0.5."""

    def generate(self, requests, params, seed):
        return [Completion([r.prompt_ids[-1]], [-0.5], "x", "length") for r in requests]

    def prompt_logprobs(self, prompts, temperature):
        return [[0.0] * len(p) for p in prompts]


@pytest.fixture()
def base_url():
    server = make_server(EchoSampler(), "127.0.0.1", 0, model_path="/models/tiny")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, json.loads(response.read())


def post(url, body: bytes):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_server_info_under_both_names_says_one_engine_without_memory_saver(base_url):
    for path in ("/server_info", "/get_server_info"):
        status, info = get(base_url + path)
        assert status == 200
        # slime asserts enable_memory_saver equals its own --offload-rollout (False in rollout-only
        # runs), and derives the engine's size from the parallel sizes: one GPU, no parallelism
        assert info["enable_memory_saver"] is False
        assert (info["tp_size"], info["pp_size"], info["dp_size"], info["num_gpus"]) == (1, 1, 1, 1)
        assert info["model_path"] == "/models/tiny"
        # not a prefill or decode worker: slime infers a regular worker
        assert info["disaggregation_mode"] not in ("prefill", "decode")


def test_model_info_names_the_model(base_url):
    status, info = get(base_url + "/model_info")
    assert status == 200 and info["model_path"] == "/models/tiny" and info["is_generation"] is True


def test_workers_registration_is_recorded_once_and_listed(base_url):
    assert get(base_url + "/workers") == (200, {"workers": []})
    body = json.dumps({"url": "http://127.0.0.1:1234", "worker_type": "regular"}).encode()
    assert post(base_url + "/workers", body)[0] == 200
    assert post(base_url + "/workers", body)[0] == 200  # slime's engines may register again: one entry
    other = json.dumps({"url": "http://127.0.0.1:5678"}).encode()  # worker_type defaults to regular
    assert post(base_url + "/workers", other)[0] == 200
    status, listed = get(base_url + "/workers")
    assert status == 200
    assert [(w["url"], w["worker_type"]) for w in listed["workers"]] == [
        ("http://127.0.0.1:1234", "regular"), ("http://127.0.0.1:5678", "regular")]


def test_registrations_beyond_the_cap_are_refused(base_url):
    for i in range(MAX_WORKERS):
        assert post(base_url + "/workers", json.dumps({"url": f"http://127.0.0.1:{1000 + i}"}).encode())[0] == 200
    status, answer = post(base_url + "/workers", json.dumps({"url": "http://127.0.0.1:9999"}).encode())
    assert status == 400 and f"at most {MAX_WORKERS}" in answer["error"]
    # one already registered is still accepted (it changes nothing)
    assert post(base_url + "/workers", json.dumps({"url": "http://127.0.0.1:1000"}).encode())[0] == 200
    assert len(get(base_url + "/workers")[1]["workers"]) == MAX_WORKERS


@pytest.mark.parametrize("body, message", [
    (b"[1, 2]", "JSON object"),
    (b"{}", "url"),
    (b'{"url": "127.0.0.1:1234"}', "url"),
    (b'{"url": "http://127.0.0.1:1", "worker_type": "prefill"}', "regular"),
    (b"not json", "not JSON"),
])
def test_a_malformed_registration_is_refused_with_its_reason(base_url, body, message):
    status, answer = post(base_url + "/workers", body)
    assert status == 400 and message in answer["error"]
    assert get(base_url + "/workers") == (200, {"workers": []})


def test_generation_still_works_beside_the_new_routes(base_url):
    status, out = post(base_url + "/generate", json.dumps(
        {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 1}, "return_logprob": True}).encode())
    assert status == 200 and out["output_ids"] == [7]
    assert out["meta_info"]["output_token_logprobs"] == [[-0.5, 7, None]]
    assert get(base_url + "/health") == (200, {"status": "ok"})
    status, _ = post(base_url + "/nowhere", b"{}")
    assert status == 404

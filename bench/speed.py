"""Our local runtime against what users would otherwise run, on the same model and inputs, side by side.

    .venv/bin/python bench/speed.py [--model smollm2-135m] [--device cpu|cuda] [--threads N] [--repeats 3]
                                    [--batches 8 32] [--new-tokens 32] [--quick] [--out bench/results]

Four comparisons, each timed after one warm-up call, the median of ``--repeats`` calls:

1. Sampler: ``LocalSampler.generate`` (no kept cache, no stop tokens, temperature 1, top-p 1) against
   Hugging Face ``model.generate(do_sample=True, top_k=0, min_new_tokens=L, max_new_tokens=L)`` on the
   same B prompts (the first prompt of B different games of the built-in chain of vaults, left-padded
   for ``generate``). Both must produce exactly L tokens per row; the counts are checked and
   reported. Generated tokens/s, and ours/generate.
2. Trainer: one ``PolicyTrainer.step`` against a plain step on the same samples (right-padded,
   ``model(input_ids, attention_mask).logits``, log-softmax cross-entropy on the trained tokens
   weighted by the advantage, backward, clip, AdamW), in micro-batches of at most
   ``--tokens-per-micro-batch`` padded tokens on both sides. Samples are game trajectories: a
   prompt of about ``--prompt-tokens`` tokens (played rounds of a game) with loss mask 0, then
   ``--completion-tokens`` trained tokens. Two batches: a TD update's (``--groups`` prompts x
   ``--group-size`` samples sharing each) and one where every sample has its own game. Tokens/s =
   the samples' real tokens / seconds of one optimiser step. Our trainer runs a prefix that a
   micro-batch's rows share once (``train/model_tokens`` reports what went through the model).
3. LoRA: the same trainer step with the model wrapped by peft (rank ``--lora-rank``, alpha 2 x rank,
   dropout 0, adapters on every attention and MLP projection, only they train) against full
   fine-tuning (the numbers of 2).
4. Peak memory of every measurement: each runs in its own process, and the growth of its peak
   resident set from just before the warm-up to the end is reported (the kernel's high-water mark
   is reset first; the AdamW state that the first step allocates counts). On CUDA:
   ``torch.cuda.max_memory_allocated`` above what was allocated before.

Prints a table and writes ``speed-<model>.md`` and ``speed-<model>.json`` (settings, machine: cores,
torch version, threads, load average before and after, date) under ``--out``. ``--quick``: tiny
sizes, one repeat, for the smoke test. ``--model`` takes a named model (``smollm2-135m``) or a
local Hugging Face model directory.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RESULT_PREFIX = "SPEED-RESULT "
CUDA_MICRO_BATCH = 16384  # PolicyTrainer's default
CPU_MICRO_BATCH = 2048
"""A training step's activations take about 1.5 MB per token through SmolLM2-135M in float32 (2.2 MB
in the plain step, with its full-vocabulary logits): the trainer's default budget, 16384 padded
tokens, would need 25-35 GB of memory on a CPU."""
ENV_NAME = "vaults"
ENV_MAX_STEPS = 30
PROMPT_SEED = 1000  # game seeds of the sampler prompts: 1000, 1001, ...
TRAIN_SEED = 2000  # game seeds of the training trajectories


# -- inputs ------------------------------------------------------------------------------------------


def sampler_prompts(protocol: Any, batch: int) -> list[list[int]]:
    """The first prompt (system + task + first observation) of ``batch`` different games."""
    from tempo_plugin.envs import make

    env = make(ENV_NAME, max_steps=ENV_MAX_STEPS)
    prompts = []
    for game in range(PROMPT_SEED, PROMPT_SEED + batch):
        observation = env.reset(game)
        prompts.append(protocol.render_prompt(protocol.initial_messages(env.task, observation)))
    return prompts


def game_prompt(protocol: Any, env: Any, game: int, min_tokens: int) -> list[int]:
    """A mid-episode prompt of game ``game``: random admissible actions played (as the actor's
    ``<action>`` replies) until the prompt holds at least ``min_tokens`` tokens; the next game if
    this one ends first."""
    from tempo_plugin.rollout.protocol import format_action

    stop = list(protocol.stop_token_ids[:1])
    for attempt in range(100):
        rng = random.Random(game * 1000 + attempt)
        observation = env.reset(game + 10_000 * attempt)
        prompt = protocol.render_prompt(protocol.initial_messages(env.task, observation))
        while len(prompt) < min_tokens:
            action = rng.choice(env.admissible_actions())
            result = env.step(action)
            if result.done:
                break
            prompt, _ = protocol.extend(prompt, protocol.encode(format_action(action)) + stop, result.observation)
        if len(prompt) >= min_tokens:
            return prompt
    raise RuntimeError(f"no game reached a {min_tokens}-token prompt")


REASONS = [
    "The sign calls for this key, so I take it.",
    "I hold the right key; the vault is to the north.",
    "Waiting gains nothing here, moving on is better.",
    "This door opens with the key I carry.",
]


def completion_tokens(protocol: Any, env: Any, rng: random.Random, length: int) -> list[int]:
    """``length`` trained tokens: a short reasoning text then an admissible ``<action>`` reply and the
    stop token, the reasoning repeated or cut so the whole has exactly ``length`` tokens."""
    from tempo_plugin.rollout.protocol import format_action

    action = protocol.encode(format_action(rng.choice(env.admissible_actions()))) + list(protocol.stop_token_ids[:1])
    reasoning = protocol.encode(" ".join(rng.sample(REASONS, len(REASONS))) + " ")
    room = max(0, length - len(action))
    filler = (reasoning * (room // max(1, len(reasoning)) + 1))[:room]
    return (filler + action)[-length:] if length else []


def train_samples(protocol: Any, groups: int, group_size: int, prompt_tokens: int, completion: int, shared: bool,
                  seed: int = TRAIN_SEED) -> list[Any]:
    """``groups`` x ``group_size`` samples: with ``shared``, the samples of a group continue the same
    game prompt (a TD update's N branches of one state); else each sample has its own game.
    Advantages +-1 (alternating), old log-probs 0."""
    from tempo_plugin.envs import make
    from tempo_plugin.rollout.samples import ACTOR, make_sample

    env = make(ENV_NAME, max_steps=ENV_MAX_STEPS)
    rng = random.Random(seed)
    samples = []
    for g in range(groups):
        for k in range(group_size):
            game = seed + (g if shared else g * group_size + k)
            if shared and k > 0:
                prompt = samples[-1].tokens[:samples[-1].prompt_length]
            else:
                prompt = game_prompt(protocol, env, game, prompt_tokens)
            reply = completion_tokens(protocol, env, rng, completion)
            tokens = prompt + reply
            mask = [0] * len(prompt) + [1] * len(reply)
            advantage = 1.0 if (g + k) % 2 == 0 else -1.0
            samples.append(make_sample(tokens, mask, [0.0] * len(tokens), advantage, ACTOR, g, advantage))
    return samples


# -- measuring ---------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakMemory:
    """Peak memory growth over a block: CUDA's max allocated, else the resident set's high-water mark
    (reset through /proc/self/clear_refs where Linux allows it, else ru_maxrss, which is then an
    upper bound: an earlier peak, the model's loading, may hide the block's)."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before = torch.cuda.memory_allocated(self.device)
            self.method = "torch.cuda.max_memory_allocated"
            return self
        self.before = (_status_kb("VmRSS") or 0) * 1024
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")  # reset the resident set's high-water mark (VmHWM)
            self.method = "VmHWM after a reset (per-process peak RSS)"
        except OSError:
            self.method = "ru_maxrss (not reset: an upper bound)"
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            import resource

            hwm = _status_kb("VmHWM") if self.method.startswith("VmHWM") else None
            if hwm is not None:
                self.peak = hwm * 1024
            else:  # ru_maxrss: kilobytes on Linux, bytes on macOS
                maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                self.peak = maxrss if sys.platform == "darwin" else maxrss * 1024
        self.growth = max(0, self.peak - self.before)

    def report(self) -> dict[str, Any]:
        mb = 1024 * 1024
        return {"peak_growth_mb": round(self.growth / mb, 1), "before_mb": round(self.before / mb, 1),
                "peak_mb": round(self.peak / mb, 1), "memory_method": self.method}


def timed_calls(call: Callable[[int], Any], repeats: int, device: torch.device) -> tuple[list[float], list[Any]]:
    """One warm-up call (seed 0, untimed), then ``repeats`` timed calls (seeds 1..repeats)."""
    call(0)
    synchronize(device)
    seconds, outputs = [], []
    for seed in range(1, repeats + 1):
        synchronize(device)
        tic = time.perf_counter()
        outputs.append(call(seed))
        synchronize(device)
        seconds.append(time.perf_counter() - tic)
    return seconds, outputs


# -- the measurements (each in its own process) ------------------------------------------------------


def measure_sampler(model: Any, tokenizer: Any, protocol: Any, device: torch.device, spec: dict, args) -> dict:
    from tempo_plugin.samplers.local import LocalSampler
    from tempo_plugin.rollout.sampler import Request, SamplingParams

    batch, new_tokens = spec["batch"], spec["new_tokens"]
    prompts = sampler_prompts(protocol, batch)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eos_ids = model.generation_config.eos_token_id
    eos_ids = set(eos_ids if isinstance(eos_ids, list) else [eos_ids] if eos_ids is not None else [])
    if spec["side"] == "ours":
        sampler = LocalSampler(model, tokenizer, reuse_cache=False)
        requests = [Request(p, new_tokens) for p in prompts]
        params = SamplingParams(temperature=1.0, top_p=1.0, stop_token_ids=())

        def call(seed: int) -> list[int]:
            return [len(c.token_ids) for c in sampler.generate(requests, params, seed)]
    else:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt):] = torch.tensor(prompt)
            attention[row, width - len(prompt):] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)

        def call(seed: int) -> list[int]:
            torch.manual_seed(seed)
            out = model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=pad_id)
            counts = []
            for row in out[:, width:].tolist():  # a row that ended (an EOS) is padded after it
                ends = [i for i, token in enumerate(row) if token in eos_ids]
                counts.append(ends[0] + 1 if ends else len(row))
            return counts

    with PeakMemory(device) as memory:
        seconds, counts = timed_calls(call, args.repeats, device)
    median = statistics.median(seconds)
    per_call = [sum(c) for c in counts]
    closeness = {}
    if spec["side"] == "ours" and args.dtype != "float32":
        closeness = logprobs_against_float32(sampler, requests, params, args.model, device)
    return {**closeness,
        "seconds": seconds, "median_s": median, "tokens_per_s": statistics.median(per_call) / median if median else 0.0,
        "generated_tokens": per_call, "expected_tokens": batch * new_tokens,
        "rows_with_exactly_L": [sum(n == new_tokens for n in c) for c in counts],
        "prompt_tokens": [len(p) for p in prompts], **memory.report(),
    }


def plain_step(model: Any, optimizer: torch.optim.Optimizer, samples: list[Any], pad_id: int, device: torch.device,
               tokens_per_micro_batch: int, grad_clip: float = 1.0) -> float:
    """What one writes without our trainer: right-padded rows, full logits, log-softmax, the
    advantage-weighted negative log-likelihood of the trained tokens (mean per sample, then over
    samples), backward per micro-batch, clip, AdamW."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    batches: list[list[Any]] = [[]]
    for sample in samples:  # in the given order, a new micro-batch when the padded size would exceed the budget
        rows = batches[-1] + [sample]
        if batches[-1] and len(rows) * max(len(s.tokens) for s in rows) > tokens_per_micro_batch:
            batches.append([sample])
        else:
            batches[-1] = rows
    total = 0.0
    for rows in batches:
        width = max(len(s.tokens) for s in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width))
        advantages = torch.zeros((len(rows), width))
        for i, s in enumerate(rows):
            n = len(s.tokens)
            ids[i, :n] = torch.tensor(s.tokens)
            attention[i, :n] = 1
            mask[i, :n] = torch.tensor(s.loss_mask, dtype=torch.float32)
            advantages[i, :n] = torch.tensor(s.advantages)
        ids, attention, mask, advantages = (t.to(device) for t in (ids, attention, mask, advantages))
        logits = model(input_ids=ids, attention_mask=attention).logits.float()
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        mask, advantages = mask[:, 1:], advantages[:, 1:]
        per_sample = -(logprobs * advantages * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        loss = per_sample.sum() / len(samples)
        loss.backward()
        total += loss.detach().item()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
    optimizer.step()
    model.eval()
    return total


def measure_trainer(model: Any, tokenizer: Any, protocol: Any, device: torch.device, spec: dict, args) -> dict:
    from tempo_plugin.embedded.trainer import PolicyTrainer

    samples = train_samples(protocol, args.groups, args.group_size, args.prompt_tokens, args.completion_tokens,
                            spec["batch"] == "shared")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    extra: dict[str, Any] = {}
    if spec["side"] == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0,
                                                 target_modules=LORA_TARGETS))
    trainable = [p for p in model.parameters() if p.requires_grad]
    extra["trainable_params"] = sum(p.numel() for p in trainable)
    optimizer = torch.optim.AdamW(trainable, lr=args.learning_rate, weight_decay=0.0)
    if spec["side"] in ("ours", "lora"):
        trainer = PolicyTrainer(model, optimizer, pad_id, tokens_per_micro_batch=args.tokens_per_micro_batch)

        def call(seed: int) -> dict:
            return trainer.step(samples)
    else:
        def call(seed: int) -> dict:
            return {"train/loss": plain_step(model, optimizer, samples, pad_id, device, args.tokens_per_micro_batch)}

    with PeakMemory(device) as memory:
        seconds, metrics = timed_calls(call, args.repeats, device)
    median = statistics.median(seconds)
    tokens = sum(len(s.tokens) for s in samples)
    prompts = [s.prompt_length for s in samples]
    last = metrics[-1]
    if "train/model_tokens" in last:
        extra["model_tokens"] = int(last["train/model_tokens"])
    return {
        "seconds": seconds, "median_s": median, "tokens_per_s": tokens / median if median else 0.0,
        "samples": len(samples), "tokens": tokens, "trained_tokens": sum(sum(s.loss_mask) for s in samples),
        "prompt_tokens_mean": statistics.mean(prompts), "distinct_prompts": len({tuple(s.tokens[:s.prompt_length]) for s in samples}),
        "loss": float(last["train/loss"]), **extra, **memory.report(),
    }


def logprobs_against_float32(sampler: Any, requests: list, params: Any, model_name: str, device: torch.device) -> dict:
    """The sampler's per-token log-probs of one call against the same tokens' log-probs under the
    model in float32 (what the trainer recomputes): max and mean |difference|."""
    from tempo_plugin.embedded.model import load_pretrained
    from tempo_plugin.logprobs import token_logprobs

    completions = sampler.generate(requests, params, seed=12345)
    exact, _ = load_pretrained(model_name, device)
    diffs: list[float] = []
    with torch.no_grad():
        for request, completion in zip(requests, completions):
            ids = torch.tensor([list(request.prompt_ids) + completion.token_ids], device=device)
            recomputed = token_logprobs(exact, ids, torch.ones_like(ids), params.temperature,
                                        first=len(request.prompt_ids))[0, len(request.prompt_ids):]
            diffs += (recomputed.float().cpu() - torch.tensor(completion.logprobs)).abs().tolist()
    return {"logprob_abs_diff_max": max(diffs), "logprob_abs_diff_mean": statistics.mean(diffs)}


def measure_one(spec: dict, args) -> dict:
    """Load the model afresh and run one measurement."""
    from tempo_plugin.embedded.model import load_pretrained
    from tempo_plugin.rollout.protocol import ChatProtocol

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model, tokenizer = load_pretrained(args.model, device)
    model.to(getattr(torch, args.dtype))
    with torch.no_grad():  # weights loaded as a file mapping become resident now, not in the measurement
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.sum()
    protocol = ChatProtocol(tokenizer)
    about = {"model_params": sum(p.numel() for p in model.parameters()), "model_class": type(model).__name__,
             "dtype": str(next(model.parameters()).dtype).replace("torch.", ""), "threads": torch.get_num_threads()}
    measure = measure_sampler if spec["kind"] == "sampler" else measure_trainer
    load = load_average()
    return {**spec, **measure(model, tokenizer, protocol, device, spec, args), **about,
            "load_average": [load, load_average()]}


def worker(args) -> None:
    """Run one measurement (``--worker`` JSON spec) and print its result as one JSON line."""
    print(RESULT_PREFIX + json.dumps(measure_one(json.loads(args.worker), args)), flush=True)


# -- orchestration and the report --------------------------------------------------------------------


def run_in_process(spec: dict, args) -> dict:
    tic = time.perf_counter()
    try:
        result = measure_one(spec, args)
    except Exception as error:  # noqa: BLE001  (reported in the table, like a failed worker)
        return {**spec, "error": f"{type(error).__name__}: {error}"}
    finally:
        gc.collect()
    result["process_s"] = round(time.perf_counter() - tic, 1)
    return result


def run_worker(spec: dict, argv: list[str]) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", json.dumps(spec)]
    tic = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        lines = [line for line in (done.stdout + done.stderr).strip().splitlines() if "it/s]" not in line]
        tail = "\n".join(lines[-15:])
        return {**spec, "error": f"exit {done.returncode}: {tail}"}
    result = json.loads(lines[-1][len(RESULT_PREFIX):])
    result["process_s"] = round(time.perf_counter() - tic, 1)
    return result


def machine_info(args) -> dict:
    cpu = platform.processor()
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        cpu = names[0] if names else cpu
    except OSError:
        pass
    info = {
        "cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable_cores(), "threads": args.threads,
        "device": args.device, "platform": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__,
    }
    for package in ("transformers", "peft"):
        try:
            info[package] = __import__(package).__version__
        except ImportError:
            info[package] = None
    if args.device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def python_name() -> str:
    try:
        return str(Path(sys.executable).relative_to(ROOT))
    except ValueError:
        return sys.executable


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def model_slug(model: str) -> str:
    name = Path(model.rstrip("/")).name if os.sep in model or Path(model).is_dir() else model
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-").lower() or "model"


def ratio(a: dict, b: dict) -> float | None:
    if not a.get("tokens_per_s") or not b.get("tokens_per_s"):
        return None
    return a["tokens_per_s"] / b["tokens_per_s"]


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown_table(title: str, header: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """A ``## title`` section holding one table; ``align`` has one letter per column, l or r."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    return ["", f"## {title}", "", line(header), line(["---:" if a == "r" else "---" for a in align]), *map(line, rows)]


def render(report: dict) -> str:
    s, m = report["settings"], report["machine"]
    lines = [
        f"# Speed: our local runtime against the usual baseline, {report['model']}",
        "",
        *([f"**Incomplete**: {sum(not r.get('pending') for r in all_measurements(report))} of "
           f"{len(all_measurements(report))} measurements so far (`--resume` continues).", ""]
          if not report.get("complete", True) else []),
        f"{report['date']}; {m['cpu']} ({m['usable_cores']} usable of {m['cores']} cores), device {m['device']}"
        + (f" ({m['gpu']})" if m.get("gpu") else "")
        + f", {m['threads']} torch threads; torch {m['torch']}, transformers {m['transformers']}, peft {m['peft']}; "
        f"load average {report['load_average_before']} before, {report['load_average_after']} after.",
        f"Model: {report.get('model_class', '?')}, {fmt(report.get('model_params'))} parameters, {report.get('dtype', '?')}. "
        f"Median of {s['repeats']} calls after one warm-up; "
        + ("all measurements in one process." if s.get("in_process") else "each measurement in its own process."),
    ]
    rows = []
    for row in report["sampler"]:
        ours, base = row["ours"], row["generate"]
        prompt = statistics.mean(ours.get("prompt_tokens") or base.get("prompt_tokens") or [0])
        counts = [f"{r.get('generated_tokens', ['n/a'])[-1]} / {row['batch'] * row['new_tokens']}" for r in (ours, base)]
        rows.append([f"{row['batch']} x {row['new_tokens']}", f"{prompt:.0f}", fmt(ours.get("tokens_per_s")),
                     fmt(base.get("tokens_per_s")), fmt(row["ratio"], 2), counts[0], counts[1],
                     fmt(ours.get("peak_growth_mb")), fmt(base.get("peak_growth_mb"))])
    lines += markdown_table(
        "Sampler: generated tokens/s",
        ["B x L", "prompt tokens (mean)", "ours tok/s", "generate tok/s", "ours / generate", "tokens ours",
         "tokens generate", "peak mem ours (MB)", "peak mem generate (MB)"],
        "lrrrrllrr", rows)
    checked = [row for row in report["sampler"] if "logprob_abs_diff_max" in row["ours"]]
    if checked:
        lines += ["", "Our sampler's log-probs against the float32 recompute of the same tokens (max / mean |difference|): "
                  + "; ".join(f"{r['batch']} x {r['new_tokens']}: {r['ours']['logprob_abs_diff_max']:.3f} / "
                              f"{r['ours']['logprob_abs_diff_mean']:.4f}" for r in checked) + "."]
    if not s.get("sampler_only"):
        rows = []
        for row in report["trainer"]:
            ours, base = row["ours"], row["plain"]
            rows.append([row["batch_label"], fmt(ours.get("samples")), fmt(ours.get("tokens")), fmt(ours.get("model_tokens")),
                         fmt(ours.get("tokens_per_s")), fmt(base.get("tokens_per_s")), fmt(row["ratio"], 2),
                         fmt(ours.get("median_s"), 2), fmt(base.get("median_s"), 2), fmt(ours.get("peak_growth_mb")),
                         fmt(base.get("peak_growth_mb"))])
        lines += markdown_table(
            "Trainer: one optimiser step, real tokens of the samples / seconds",
            ["batch", "samples", "tokens", "model tokens (ours)", "ours tok/s", "plain tok/s", "ours / plain", "ours s",
             "plain s", "peak mem ours (MB)", "peak mem plain (MB)"],
            "lrrrrrrrrrr", rows)
        rows = []
        for row in report["lora"]:
            lora, full = row["lora"], row["full"]
            rows.append([row["batch_label"], fmt(lora.get("trainable_params")), fmt(lora.get("tokens_per_s")),
                         fmt(full.get("tokens_per_s")), fmt(row["ratio"], 2), fmt(lora.get("peak_growth_mb")),
                         fmt(full.get("peak_growth_mb"))])
        lines += markdown_table(
            f"LoRA (rank {s['lora_rank']}, alpha {2 * s['lora_rank']}, all projections) against full fine-tuning, our trainer",
            ["batch", "trainable params", "LoRA tok/s", "full tok/s", "LoRA / full", "peak mem LoRA (MB)", "peak mem full (MB)"],
            "lrrrrrr", rows)
    methods = {r.get("memory_method") for r in all_measurements(report) if r.get("memory_method")}
    lines += [
        "",
        f"Peak memory: growth of the process's peak over what it held before the warm-up ({'; '.join(sorted(methods))}); "
        "a training step's includes the AdamW state its first step allocates"
        + (" (all in one process: memory an earlier measurement freed is reused, so these are rough)." if s.get("in_process") else "."),
        f"Sampler: no stop tokens, temperature 1, top-p 1; `generate` with top_k=0 and min_new_tokens = max_new_tokens = L. "
        f"Trainer: {s['groups']} x {s['group_size']} samples, prompts of >= {s['prompt_tokens']} tokens (played game rounds), "
        f"{s['completion_tokens']} trained tokens each; 'shared': the {s['group_size']} samples of a group share their prompt; "
        f"'own game': every sample has its own. Micro-batches of at most {s['tokens_per_micro_batch']} padded tokens on both sides.",
    ]
    skipped = [r for r in all_measurements(report) if "skipped" in r]
    if skipped:
        lines += ["", "Not measured:", ""] + [f"- {r['kind']} {r['side']} {r.get('batch')}: {r['skipped']}" for r in skipped]
    errors = [r for r in all_measurements(report) if "error" in r]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {r['kind']} {r['side']} {r.get('batch')}: {' ... '.join(dict.fromkeys([r['error'].splitlines()[0], r['error'].splitlines()[-1]]))}"
                                       for r in errors]
    return "\n".join(lines) + "\n"


def all_measurements(report: dict) -> list[dict]:
    out = []
    for row in report.get("sampler", []):
        out += [row["ours"], row["generate"]]
    for row in report.get("trainer", []):
        out += [row["ours"], row["plain"]]
    out += [row["lora"] for row in report.get("lora", [])]
    return out


def parse_args(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a named model (smollm2-135m) or a local HF model directory")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=min(usable_cores(), 16), help="torch threads (default: all cores, up to 16)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per measurement (median), after one warm-up")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32], help="sampler batch sizes B")
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[32], help="sampler new tokens per row L")
    parser.add_argument("--groups", type=int, default=8, help="trainer: prompts (TD groups)")
    parser.add_argument("--group-size", type=int, default=4, help="trainer: samples per prompt")
    parser.add_argument("--prompt-tokens", type=int, default=300, help="trainer: minimum prompt length (game rounds played)")
    parser.add_argument("--completion-tokens", type=int, default=40, help="trainer: trained tokens per sample")
    parser.add_argument("--tokens-per-micro-batch", type=int, default=0,
                        help="padded tokens per micro-batch, both trainers (default: 2048 on CPU, 16384 on CUDA)")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="the model's dtype on both sides; with bfloat16 our sampler's log-probs are also checked "
                             "against a float32 recompute (writes speed-<model>-bfloat16.md/.json)")
    parser.add_argument("--sampler-only", action="store_true", help="measure the sampler only, not the trainer")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one repeat (the smoke test)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="folder of speed-<model>.md/.json")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the measurements that the output JSON already holds when it was made with the "
                             "same settings (an interrupted run saves each measurement as it finishes)")
    parser.add_argument("--in-process", action="store_true",
                        help="run every measurement in this process (faster start; peak memory then less clean: "
                             "memory freed by an earlier measurement is reused)")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.batches, args.new_tokens = 1, [2], [4]
        args.groups, args.group_size, args.prompt_tokens, args.completion_tokens = 2, 2, 0, 4
        args.lora_rank = min(args.lora_rank, 4)
    if not args.tokens_per_micro_batch:
        args.tokens_per_micro_batch = CUDA_MICRO_BATCH if args.device == "cuda" else CPU_MICRO_BATCH
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    return args


def worker_argv(args) -> list[str]:
    """The settings a worker needs (already resolved: --quick is not passed on)."""
    return ["--model", args.model, "--device", args.device, "--threads", str(args.threads), "--repeats", str(args.repeats),
            "--groups", str(args.groups), "--group-size", str(args.group_size), "--prompt-tokens", str(args.prompt_tokens),
            "--completion-tokens", str(args.completion_tokens), "--tokens-per-micro-batch", str(args.tokens_per_micro_batch),
            "--learning-rate", str(args.learning_rate), "--lora-rank", str(args.lora_rank), "--dtype", args.dtype]


def measurement_specs(args) -> list[dict]:
    """Every measurement, in the order they run."""
    specs = [{"kind": "sampler", "side": side, "batch": batch, "new_tokens": new_tokens}
             for batch in args.batches for new_tokens in args.new_tokens for side in ("ours", "generate")]
    if args.sampler_only:
        return specs
    return specs + [{"kind": "trainer", "side": side, "batch": batch}
                    for batch in ("shared", "own") for side in ("ours", "plain", "lora")]


def missing_extra(spec: dict) -> str:
    """Why ``spec`` cannot be measured on this install ('' when it can): the LoRA rows need peft."""
    if spec["side"] == "lora" and importlib.util.find_spec("peft") is None:
        return "skipped: peft is not installed (pip install -e '.[smollm2]')"
    return ""


def spec_key(spec: dict) -> str:
    return json.dumps({k: spec.get(k) for k in ("kind", "side", "batch", "new_tokens")}, sort_keys=True)


def fill_sections(report: dict, results: dict[str, dict], args) -> None:
    """The report's sampler, trainer and lora rows from the measurements so far (a missing one: pending)."""
    def get(spec: dict) -> dict:
        return results.get(spec_key(spec), {**spec, "pending": True})

    report["sampler"] = []
    for batch in args.batches:
        for new_tokens in args.new_tokens:
            row: dict[str, Any] = {"batch": batch, "new_tokens": new_tokens}
            for side in ("ours", "generate"):
                row[side] = get({"kind": "sampler", "side": side, "batch": batch, "new_tokens": new_tokens})
            row["ratio"] = ratio(row["ours"], row["generate"])
            report["sampler"].append(row)
    labels = {"shared": f"{args.groups} prompts x {args.group_size} (shared)",
              "own": f"{args.groups * args.group_size} samples, own game each"}
    report["trainer"], report["lora"] = [], []
    for batch in ("shared", "own"):
        ours, plain, lora = (get({"kind": "trainer", "side": side, "batch": batch}) for side in ("ours", "plain", "lora"))
        report["trainer"].append({"batch": batch, "batch_label": labels[batch], "ours": ours, "plain": plain,
                                  "ratio": ratio(ours, plain)})
        report["lora"].append({"batch": batch, "batch_label": labels[batch], "lora": lora, "full": ours,
                               "ratio": ratio(lora, ours)})


def comparable_settings(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k not in ("resume", "quick")}


def finished_measurements(path: Path, settings: dict) -> dict[str, dict]:
    """The measurements of an earlier report at ``path`` made with the same settings, errors left out."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if comparable_settings(old.get("settings", {})) != comparable_settings(settings):
        print(f"--resume: {path} was made with other settings; measuring everything again")
        return {}
    return {spec_key(r): r for r in all_measurements(old) if "error" not in r and "skipped" not in r and not r.get("pending")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    passed = worker_argv(args)
    out = Path(args.out)
    slug = model_slug(args.model) + ("" if args.dtype == "float32" else f"-{args.dtype}")
    json_path, md_path = out / f"speed-{slug}.json", out / f"speed-{slug}.md"
    settings = {k: v for k, v in vars(args).items() if k not in ("worker", "out")}
    results = finished_measurements(json_path, settings) if args.resume else {}
    report: dict[str, Any] = {
        "model": args.model, "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([python_name(), "bench/speed.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(args), "load_average_before": load_average(), "settings": settings,
    }
    for result in results.values():
        for key in ("model_class", "model_params", "dtype"):
            report.setdefault(key, result.get(key))
    out.mkdir(parents=True, exist_ok=True)
    specs = measurement_specs(args)
    tic = time.perf_counter()

    def save(complete: bool) -> str:
        fill_sections(report, results, args)
        report["complete"] = complete
        report["load_average_after"] = load_average()
        report["wall_s"] = round(time.perf_counter() - tic, 1)
        table = render(report)
        json_path.write_text(json.dumps(report, indent=1) + "\n")
        md_path.write_text(table)
        return table

    for spec in specs:
        key = spec_key(spec)
        if key in results:
            print(f"[{time.perf_counter() - tic:6.0f}s] {spec['kind']:<8} {spec['side']:<8} "
                  f"{spec.get('batch')!s:<7} {spec.get('new_tokens', '')!s:<4} reused (--resume)", flush=True)
            continue
        missing = missing_extra(spec)
        if missing:
            result = {**spec, "skipped": missing}
        else:
            result = run_in_process(spec, args) if args.in_process else run_worker(spec, passed)
        shown = result["error"].splitlines()[0] if "error" in result else result["skipped"] if "skipped" in result else (
            f"{result['tokens_per_s']:,.1f} tok/s, peak +{result['peak_growth_mb']:,.0f} MB")
        print(f"[{time.perf_counter() - tic:6.0f}s] {spec['kind']:<8} {spec['side']:<8} "
              f"{spec.get('batch')!s:<7} {spec.get('new_tokens', '')!s:<4} {shown}", flush=True)
        for name in ("model_class", "model_params", "dtype"):
            report.setdefault(name, result.get(name))
        results[key] = result
        save(complete=False)  # an interrupted run keeps what it measured (--resume continues it)
    table = save(complete=True)
    print()
    print(table)
    print(f"wrote {md_path} and .json")
    return 1 if any("error" in r for r in all_measurements(report)) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak resident memory of SmolLM2-135M training on the embedded runtime, against the 6 GiB goal.

    .venv/bin/python bench/memory.py [--parts step recipe] [--repeats 2] [--out bench/results]

Two parts, each measurement in a process of its own (its kernel high-water mark, ``ru_maxrss``):

1. ``step``: one ``PolicyTrainer.step`` (the trainer the recipes build, ``run_folder.policy_trainer``)
   on SmolLM2-135M-Instruct with rank-32 LoRA, on rows as long as a recipe's rows can be: 4 rows of
   ``max_trajectory_tokens`` (2,048) tokens, trained from column 100 on (multi-turn rows carry a
   loss on every round's action), for each setting in ``STEP_SETTINGS`` (``ONE_PIECE``: the logits
   as the trainer computed them before it took them in chunks). A micro-batch holds whole
   rows, so the peak is that of the largest micro-batch, however many rows a batch has.
   Reported: the peak, and the peak after loading (model + adapters) in the same process.
2. ``warmstart``: the supervised warm start's first step (full fine-tuning, the real code path with
   a cache of its own), for each setting in ``WARM_SETTINGS``: a recipe's first run holds it.
3. ``recipe``: ``scripts/smollm2-135m/{tempo,grpo}.sh`` as shipped, cut short (``RECIPE_SHORT``: one
   update of each kind, 8 held-out games, the supervised warm start taken from the cache that the
   first call fills), the peak of the trainer process (``os.wait4``), per ``RECIPE_SETTINGS``.

Writes ``memory-smollm2-135m.md`` and ``.json`` under ``--out`` (settings, machine, date, every
repeat). The machine is whatever runs it: peaks do not depend on other jobs, timings do.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
GOAL_GIB = 6.0
ROWS, TOKENS, FIRST_TRAINED = 4, 2048, 100
ONE_PIECE = "--logits-in-one-piece"
"""A pseudo-flag of this bench: the trainer computes a micro-batch's logits at once, as before chunking."""
STEP_SETTINGS: dict[str, list[str]] = {
    "2,048-token micro-batch, logits in one piece (before)": ["--train-tokens-per-micro-batch", "2048", ONE_PIECE],
    "2,048-token micro-batch": ["--train-tokens-per-micro-batch", "2048"],
    "2,048-token micro-batch, activation checkpointing": ["--train-tokens-per-micro-batch", "2048",
                                                          "--activation-checkpointing"],
    "8,192-token micro-batch, activation checkpointing": ["--train-tokens-per-micro-batch", "8192",
                                                          "--activation-checkpointing"],
}
WARM_SETTINGS: dict[str, list[str]] = {
    "all demonstrations of a role at once, no checkpointing (before)": ["--train-tokens-per-micro-batch", "1000000000"],
    "2,048-token micro-batches, activation checkpointing (the recipes)": ["--train-tokens-per-micro-batch", "2048",
                                                                          "--activation-checkpointing"],
}
"""The warm start's first step (``model.load_warm_started`` with --warm-start-steps 1, full weights)."""
RECIPE_SHORT = {
    "tempo": ["--warmup-updates", "1", "--td-updates", "1", "--eval-games", "8", "--eval-every", "1000"],
    "grpo": ["--td-updates", "1", "--eval-games", "8", "--eval-every", "1000"],
}
RECIPE_SETTINGS: dict[str, list[str]] = {"as shipped": []}
"""The earlier recipes (16,384-token micro-batch, logits in one piece, no checkpointing) peaked at
20.5 GiB on a 24 GiB machine (docs/experiments/smollm2-135m.md): not run again here, it can push the
machine out of memory. The step part shows what each memory dial changes."""
RESULT_PREFIX = "MEMORY-RESULT "


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # ru_maxrss is in KiB on Linux


def step_worker(setting: list[str]) -> dict:
    """One trainer step on ROWS synthetic rows of TOKENS tokens under ``setting``; runs in its own process."""
    sys.path.insert(0, str(ROOT))
    import torch

    from tempo_plugin.config import parse_config
    from tempo_plugin.embedded.lora import apply_lora
    from tempo_plugin.embedded.model import load_pretrained
    from tempo_plugin.embedded.run_folder import policy_trainer
    from tempo_plugin.rollout.samples import ACTOR, make_sample

    import tempo_plugin.logprobs as logprobs_module

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if ONE_PIECE in setting:
        logprobs_module.LOGIT_CHUNK_ELEMENTS = 2**62
    cfg = parse_config(["--model", "smollm2-135m", "--lora-rank", "32", *[f for f in setting if f != ONE_PIECE]])
    model, tokenizer = load_pretrained(cfg.model, torch.device("cpu"), cfg.cache_dir)
    model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, base=cfg.model)
    trainer = policy_trainer(cfg, model, tokenizer, cfg.learning_rate)
    loaded = peak_gib()
    generator = torch.Generator().manual_seed(0)
    samples = []
    for row in range(ROWS):
        tokens = torch.randint(100, len(tokenizer) - 100, (TOKENS,), generator=generator).tolist()
        mask = [0] * FIRST_TRAINED + [1] * (TOKENS - FIRST_TRAINED)
        samples.append(make_sample(tokens, mask, [-3.0] * TOKENS, 1.0 if row % 2 else -1.0, ACTOR, row // 4, 0.0))
    tic = time.perf_counter()
    metrics = trainer.step(samples)
    return {"loaded_gib": loaded, "peak_gib": peak_gib(), "seconds": time.perf_counter() - tic,
            "model_tokens": metrics["train/model_tokens"]}


def warm_worker(setting: list[str]) -> dict:
    """One warm-start step under ``setting``, its cache in a new folder beside the converted model."""
    sys.path.insert(0, str(ROOT))
    import torch

    from tempo_plugin.config import parse_config
    from tempo_plugin.embedded.model import load_warm_started
    from tempo_plugin.embedded.named_models import model_directory

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    converted = Path(model_directory("smollm2-135m"))  # converted once, in the default cache
    with tempfile.TemporaryDirectory() as cache:
        (Path(cache) / converted.parent.name).symlink_to(converted.parent)
        cfg = parse_config(["--model", "smollm2-135m", "--warm-start-steps", "1", "--cache-dir", cache, *setting])
        tic = time.perf_counter()
        load_warm_started(cfg, torch.device("cpu"))
        return {"peak_gib": peak_gib(), "seconds": time.perf_counter() - tic}


def run_step(name: str, threads: int, warm: bool = False) -> dict:
    command = [sys.executable, __file__, "--worker" if not warm else "--warm-worker",
               json.dumps((WARM_SETTINGS if warm else STEP_SETTINGS)[name])]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode or not lines:
        raise RuntimeError(f"step {name!r} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def run_recipe(recipe: str, setting: list[str], threads: int, cache: Path) -> dict:
    """The recipe's trainer process, cut short; its peak from the kernel's accounting of that child."""
    with tempfile.TemporaryDirectory() as out:
        command = ["bash", str(ROOT / "scripts/smollm2-135m" / f"{recipe}.sh"), *RECIPE_SHORT[recipe], *setting,
                   "--cache-dir", str(cache), "--out", out]
        with open(Path(out) / "log.txt", "w") as log:
            tic = time.perf_counter()
            child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "OMP_NUM_THREADS": str(threads)})
            _, status, usage = os.wait4(child.pid, 0)
            seconds = time.perf_counter() - tic
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"{recipe}.sh {' '.join(setting)} failed: {(Path(out) / 'log.txt').read_text()[-2000:]}")
        return {"peak_gib": usage.ru_maxrss * 1024 / GIB, "seconds": seconds}


def summary_rows(results: dict) -> list[str]:
    rows = ["| part | setting | peak GiB (each repeat) | under 6 GiB | loaded GiB | seconds |", "|---|---|---|---|---|---|"]
    for part, settings in results.items():
        for name, repeats in settings.items():
            peaks = [r["peak_gib"] for r in repeats]
            loaded = [r["loaded_gib"] for r in repeats if "loaded_gib" in r]
            rows.append(f"| {part} | {name} | {' / '.join(f'{p:.2f}' for p in peaks)} | "
                        f"{'yes' if max(peaks) < GOAL_GIB else 'no'} | "
                        f"{f'{statistics.mean(loaded):.2f}' if loaded else '-'} | "
                        f"{statistics.median(r['seconds'] for r in repeats):.0f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["step", "warmstart", "recipe"],
                        choices=["step", "warmstart", "recipe"])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPE_SHORT), choices=list(RECIPE_SHORT))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache/tempo_plugin"),
                        help="the recipes' model and warm-start cache (filled by the first recipe call)")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--warm-worker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(RESULT_PREFIX + json.dumps(step_worker(json.loads(args.worker))), flush=True)
        return 0
    if args.warm_worker:
        print(RESULT_PREFIX + json.dumps(warm_worker(json.loads(args.warm_worker))), flush=True)
        return 0
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record_file = out / "memory-smollm2-135m.json"
    # the parts not run this time keep their earlier results
    record = json.loads(record_file.read_text()) if record_file.is_file() else {"parts": {}}
    machine = {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
               "threads": args.threads, "date": datetime.date.today().isoformat()}
    runs: dict[str, dict[str, list[dict]]] = {}
    if "step" in args.parts:
        for name in STEP_SETTINGS:
            for repeat in range(args.repeats):
                result = run_step(name, args.threads)
                runs.setdefault(f"step: {ROWS} x {TOKENS} tokens", {}).setdefault(name, []).append(result)
                print(f"step | {name} | repeat {repeat}: peak {result['peak_gib']:.2f} GiB, "
                      f"{result['seconds']:.0f} s", flush=True)
    if "warmstart" in args.parts:
        for name in WARM_SETTINGS:
            for repeat in range(args.repeats):
                result = run_step(name, args.threads, warm=True)
                runs.setdefault("warm start: its first step", {}).setdefault(name, []).append(result)
                print(f"warm start | {name} | repeat {repeat}: peak {result['peak_gib']:.2f} GiB, "
                      f"{result['seconds']:.0f} s", flush=True)
    if "recipe" in args.parts:
        for recipe in args.recipes:
            for name, setting in RECIPE_SETTINGS.items():
                for repeat in range(args.repeats):
                    result = run_recipe(recipe, setting, args.threads, Path(args.cache_dir))
                    runs.setdefault(f"recipe: {recipe}.sh", {}).setdefault(name, []).append(result)
                    print(f"{recipe}.sh | {name} | repeat {repeat}: peak {result['peak_gib']:.2f} GiB, "
                          f"{result['seconds']:.0f} s", flush=True)
    for part, results in runs.items():
        settings = (STEP_SETTINGS if part.startswith("step") else WARM_SETTINGS if part.startswith("warm") else
                    {"short": RECIPE_SHORT, "settings": RECIPE_SETTINGS})
        record["parts"][part] = {"machine": {**machine, "load_after": os.getloadavg()}, "settings": settings,
                                 "results": results}
    record_file.write_text(json.dumps(record, indent=1))
    table = summary_rows({part: entry["results"] for part, entry in record["parts"].items()})
    dates = sorted({entry["machine"]["date"] for entry in record["parts"].values()})
    (out / "memory-smollm2-135m.md").write_text(
        f"Peak resident memory, SmolLM2-135M-Instruct + rank-32 LoRA, float32, {machine['cores']} cores, "
        f"{', '.join(dates)} (bench/memory.py; goal: under {GOAL_GIB:.0f} GiB).\n\n" + "\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

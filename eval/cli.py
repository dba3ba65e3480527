"""The command line of ``bash eval/eval.sh`` (``python -m eval``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tempo_plugin.config import ConfigError
from tempo_plugin.run_lock import writer_lock
from tempo_plugin.runs import OneLineParser, UsageError

from eval.benchmarks import GREEDY_TEMPERATURE, AgentBenchmark, MathBenchmark, Result, Settings
from eval.report import markdown_table, results_json
from eval.targets import Target, local_target, one_line, release, server_target, unique_names

PROG = "eval/eval.sh"
DESCRIPTION = """\
Evaluate one or more runs, models or servers side by side: success on held-out games of the agent
environments and accuracy on local math sets, each as greedy and pass@k with its standard error.
Results go to a JSON file and a markdown table (printed, and saved beside the JSON)."""
EPILOG = """\
targets:
  a run directory (runs/<name>: its config.yaml and checkpoints/latest or policy/) or a local
  Hugging Face model directory; a server with --server/--openai and --tokenizer. Generation
  settings (max_assistant_tokens, max_episode_steps, max_trajectory_tokens, temperature, top_p)
  are the run's, else TempoConfig's defaults.

benchmarks:
  agent: the first --games held-out games of each environment of --envs (default: the env a
    TEMPO/multi-turn GRPO run trained on; vaults for a model or server, none when --math is given).
    textworld and alfworld need their extras and held-out game folders, which training never plays
    (textworld: <games>/eval; alfworld: the split of --eval-split, else the run's, else valid_unseen;
    see data/README.md), else they are reported as skipped with the folder and the command that
    makes it.
  math: --math NAME=PATH.jsonl, a file of {"prompt", "label"} lines (see data/README.md).
  greedy = one episode/answer per item at temperature 1e-5; pass@k = unbiased estimator from
  --samples sampled episodes/answers per item. The +- is one standard error over the items.

examples:
  bash eval/eval.sh runs/seed0
  bash eval/eval.sh runs/tempo runs/grpo --envs vaults,vault --games 128
  bash eval/eval.sh runs/seed0 --vaults 2 --games 128
  bash eval/eval.sh ~/models/Qwen3-4B --math aime24=data/eval/aime24.jsonl --k 8 --max-new-tokens 4096
  bash eval/eval.sh --server http://127.0.0.1:30000 --tokenizer ~/models/Qwen3-4B --envs alfworld"""

ENV_CHOICES = ("vaults", "vault", "textworld", "alfworld")




def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", metavar="MODEL_OR_RUN",
                   help="run directories or Hugging Face model directories, evaluated side by side")
    p.add_argument("--server", action="append", default=[], metavar="URL",
                   help="also evaluate an SGLang(-compatible) server through its native /generate "
                        "(e.g. http://127.0.0.1:30000, or python -m tempo_plugin.embedded.serve); repeatable")
    p.add_argument("--openai", action="append", default=[], metavar="URL",
                   help="also evaluate an OpenAI-style /v1/completions server (vLLM, SGLang, ...; "
                        "e.g. http://127.0.0.1:8000); repeatable")
    p.add_argument("--openai-model", default="", metavar="NAME",
                   help="the model name sent to --openai servers (default: the first of their /v1/models)")
    p.add_argument("--tokenizer", metavar="DIR",
                   help="Hugging Face directory (or run directory) of the served model's tokenizer, to render "
                        "prompts for --server/--openai; a run directory also gives its generation settings")
    p.add_argument("--envs", metavar="LIST",
                   help="comma-separated environments to play: vaults, vault, textworld, alfworld; 'all' (every "
                        "one, unavailable ones reported as skipped) or 'none' (default: see below)")
    p.add_argument("--games", type=int, default=64, metavar="N", help="held-out games per environment (default: %(default)s)")
    p.add_argument("--vaults", type=int, metavar="V",
                   help="chain length of the vaults game (default: a run's own --vaults, 3 for a model or server); "
                        "its episodes get at least 10 V rounds")
    p.add_argument("--eval-split", choices=("valid_unseen", "valid_seen"),
                   help="ALFWorld's held-out split to play (default: a run's own --eval-split, else valid_unseen)")
    p.add_argument("--math", action="append", default=[], metavar="NAME=PATH",
                   help="a math benchmark: a local JSONL file of {prompt, label} lines named NAME; repeatable")
    p.add_argument("--problems", type=int, metavar="N",
                   help="only the first N problems of each math file (default: all lines)")
    p.add_argument("--max-new-tokens", type=int, default=1024, metavar="N",
                   help="token cap of one math answer (default: %(default)s)")
    p.add_argument("--k", type=int, default=4, help="k of pass@k (default: %(default)s)")
    p.add_argument("--samples", type=int, metavar="N",
                   help="sampled episodes/answers per game or problem for pass@k, >= k (default: k)")
    p.add_argument("--temperature", type=float,
                   help="sampling temperature of pass@k (default: the run's temperature, 1.0 for a model)")
    p.add_argument("--top-p", type=float, help="nucleus threshold of pass@k (default: the run's top_p, 1.0 for a model)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="where local models run (default: %(default)s: cuda when available)")
    p.add_argument("--out", metavar="PATH",
                   help="results JSON file, or a directory for results.json; results.md is written beside it "
                        "(default: eval_results/<timestamp>/results.json)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads of torch (default: the number of cores, at most 16)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


# -- reading the command line ---------------------------------------------------------------------------------


def parse_envs(text: str | None, targets: Sequence[Target], math_given: bool) -> list[str]:
    if text is None:
        own = list(dict.fromkeys(t.own_env for t in targets if t.own_env))
        return own or ([] if math_given else ["vaults"])
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    if names == ["all"]:
        return list(ENV_CHOICES)
    unknown = [n for n in names if n not in ENV_CHOICES]
    if unknown or not names:
        raise UsageError(f"--envs {text}: unknown environment {unknown[0] if unknown else '(empty)'!r}; "
                         f"choose from {', '.join(ENV_CHOICES)}, all or none")
    return list(dict.fromkeys(names))


def parse_math(specs: Sequence[str], problems: int | None) -> list[MathBenchmark]:
    from tempo_plugin.tasks.math import MathTask

    benchmarks: list[MathBenchmark] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise UsageError(f"--math {spec}: expected NAME=PATH.jsonl, e.g. --math aime24=data/eval/aime24.jsonl")
        if any(b.label == name for b in benchmarks):
            raise UsageError(f"--math {spec}: the name {name!r} is given twice")
        if not Path(path).is_file():
            raise UsageError(f"--math {spec}: file not found: {path}")
        try:
            task = MathTask(path)
        except (ValueError, OSError, UnicodeDecodeError) as error:
            raise UsageError(f"--math {spec}: {error}") from None
        if problems is not None:
            task.problems = task.problems[:problems]
        benchmarks.append(MathBenchmark(name, path, task))
    if benchmarks:
        try:
            import math_verify  # noqa: F401
        except ImportError:
            from tempo_plugin.tasks.math import MISSING_MATH_VERIFY

            raise UsageError(f"--math: {MISSING_MATH_VERIFY}") from None
    return benchmarks


def out_paths(out: str | None) -> tuple[Path, Path]:
    if out is None:
        path = Path("eval_results") / time.strftime("%Y%m%d-%H%M%S") / "results.json"
    elif out.endswith(".json"):
        path = Path(out)
    else:
        path = Path(out) / "results.json"
    return path, path.with_suffix(".md")


def check_numbers(args: argparse.Namespace) -> None:
    if args.games < 1:
        raise UsageError(f"--games must be >= 1 (got {args.games})")
    if args.vaults is not None and args.vaults < 1:
        raise UsageError(f"--vaults must be >= 1 (got {args.vaults})")
    if args.k < 1:
        raise UsageError(f"--k must be >= 1 (got {args.k})")
    if args.samples is None:
        args.samples = args.k
    if args.samples < args.k:
        raise UsageError(f"--samples ({args.samples}) must be >= --k ({args.k})")
    if args.problems is not None and args.problems < 1:
        raise UsageError(f"--problems must be >= 1 (got {args.problems})")
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be >= 1 (got {args.max_new_tokens})")
    if args.temperature is not None and not args.temperature > 0:
        raise UsageError(f"--temperature must be > 0 (got {args.temperature})")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1 (got {args.threads})")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must be in (0, 1] (got {args.top_p})")


def build_targets(args: argparse.Namespace) -> list[Target]:
    targets = [local_target(path, args.device) for path in args.targets]
    targets += [server_target(url, "server", args.tokenizer) for url in args.server]
    targets += [server_target(url, "openai", args.tokenizer, args.openai_model) for url in args.openai]
    if not targets:
        raise UsageError("nothing to evaluate: give a run or model directory, --server URL or --openai URL")
    if args.tokenizer and not (args.server or args.openai):
        raise UsageError("--tokenizer is for --server/--openai targets (a directory target brings its own)")
    unique_names(targets)
    return targets


# -- running ------------------------------------------------------------------------------------------------------


def evaluate(targets: Sequence[Target], benchmarks: Sequence[Any], settings: Settings, progress_bar: bool) -> dict[str, dict[str, Result]]:
    from tqdm import tqdm

    from tempo_plugin.samplers.openai import OpenAIError
    from tempo_plugin.samplers.sglang_http import GenerationError

    failures = (ConfigError, GenerationError, OpenAIError, OSError)
    bar = tqdm(total=len(targets) * sum(b.work(settings) for b in benchmarks), unit="rollout", desc="eval",
               disable=not progress_bar, dynamic_ncols=True)
    results: dict[str, dict[str, Result]] = {}
    for target in targets:
        per: dict[str, Result] = results.setdefault(target.name, {})
        bar.set_description(f"{target.name}: loading")
        try:
            policy = target.open()
        except (*failures, ValueError) as error:  # e.g. a directory transformers cannot load
            for benchmark in benchmarks:
                per[benchmark.name] = Result(benchmark.name, error=one_line(error))
                bar.update(benchmark.work(settings))
            bar.write(f"{target.name}: failed to open: {one_line(error)}", file=sys.stderr)
            continue
        for benchmark in benchmarks:
            bar.set_description(f"{target.name}: {benchmark.name}")
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done += n
                bar.update(n)

            try:
                per[benchmark.name] = benchmark.run(policy, settings, advance)
            except failures as error:
                per[benchmark.name] = Result(benchmark.name, error=one_line(error))
                bar.update(benchmark.work(settings) - done)
                bar.write(f"{target.name}: {benchmark.name} failed: {one_line(error)}", file=sys.stderr)
        policy = None
        release()
    bar.close()
    return results


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    check_numbers(args)
    targets = build_targets(args)
    maths = parse_math(args.math, args.problems)
    envs = parse_envs(args.envs, targets, bool(maths))
    if args.device == "cuda" and any(t.kind in ("run", "model") for t in targets):
        from tempo_plugin.embedded.model import resolve_device

        resolve_device("cuda")  # ConfigError when torch sees no GPU
    benchmarks: list[Any] = [AgentBenchmark(env, args.games) for env in envs] + maths
    if not benchmarks:
        raise UsageError("no benchmark to run: --envs none and no --math")
    json_path, md_path = out_paths(args.out)
    try:
        json_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out {args.out or json_path}: cannot create {json_path.parent} ({error.strerror})") from None

    recorded = {"command": [PROG, *argv], "envs": envs, "games": args.games, "vaults": args.vaults, "eval_split": args.eval_split,
                "math": args.math, "problems": args.problems, "k": args.k, "samples": args.samples, "seed": args.seed,
                "temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens,
                "device": args.device, "greedy_temperature": GREEDY_TEMPERATURE,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with writer_lock(json_path.with_name(f".{json_path.name}.lock"), "eval"):  # one writer per results file
        return evaluate_and_write(args, recorded, targets, benchmarks, json_path, md_path)


def evaluate_and_write(args: argparse.Namespace, recorded: dict[str, Any], targets: list, benchmarks: list,
                       json_path: Path, md_path: Path) -> int:
    """Evaluate every target on every benchmark; write results.json (``recorded``: the command and
    its settings, then the results) and the markdown table."""
    import torch
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # one progress bar: ours
    torch.set_num_threads(args.threads or max(1, min(os.cpu_count() or 1, 16)))
    settings = Settings(k=args.k, samples=args.samples, seed=args.seed, temperature=args.temperature,
                        top_p=args.top_p, max_new_tokens=args.max_new_tokens, eval_split=args.eval_split,
                        vaults=args.vaults)
    tic = time.perf_counter()
    with torch.no_grad():
        results = evaluate(targets, benchmarks, settings, not args.no_progress)
    seconds = time.perf_counter() - tic

    names = [t.name for t in targets]
    bench_names = [b.name for b in benchmarks]
    table = markdown_table(names, bench_names, results)
    data = results_json(recorded, [t.describe() for t in targets], bench_names, results, seconds)
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(table, encoding="utf-8")
    print(table, end="")
    print(f"\nresults: {json_path} and {md_path} ({seconds:.0f} s)")
    failed = any(r.error for per in results.values() for r in per.values())
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run(argv)
    except (UsageError, ConfigError) as error:
        print(f"eval: error: {one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eval: interrupted", file=sys.stderr)
        return 130

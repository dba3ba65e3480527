"""Decoding with the in-place key/value cache against Hugging Face's copying one, by context length.

    .venv/bin/python bench/kv_cache.py [--model smollm2-135m] [--rows 16] [--contexts 128 1024]
                                       [--new-tokens 32] [--repeats 3] [--threads 1] [--out bench/results/kv-cache]

What a multi-round rollout does every round: B rows whose contexts of P tokens the sampler keeps
cached, each extended by 2 tokens and decoded for L new tokens (``LocalSampler.generate`` extending
its kept cache, temperature 1, no stop tokens). Timed: that call, the median of ``--repeats``, each
from a copy of the same kept cache; for ``LocalSampler(in_place_cache=True)`` (the default:
``samplers/kv_cache.py``) and ``False`` (``DynamicLayer``'s ``torch.cat`` per token), alternating.
Both must give the same tokens (checked). Contexts are random token ids: speed does not depend on
what they say. Writes ``kv_cache.md`` and ``kv_cache.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tempo_plugin.embedded.model import load_pretrained  # noqa: E402
from tempo_plugin.embedded.named_models import NAMED_MODELS, model_directory  # noqa: E402
from tempo_plugin.rollout.sampler import Request, SamplingParams  # noqa: E402
from tempo_plugin.samplers.local import LocalSampler  # noqa: E402


def measure(model, tokenizer, rows: int, context: int, new_tokens: int, repeats: int) -> dict:
    generator = torch.Generator().manual_seed(context)
    prompts = [torch.randint(100, tokenizer.vocab_size - 1, (context,), generator=generator).tolist() for _ in range(rows)]
    params = SamplingParams(temperature=1.0, top_p=1.0, stop_token_ids=())
    seconds: dict[bool, list[float]] = {True: [], False: []}
    tokens: dict[bool, list] = {}
    samplers, kept, requests = {}, {}, {}
    for in_place in (False, True):
        sampler = LocalSampler(model, tokenizer, in_place_cache=in_place)
        first = sampler.generate([Request(p, 1) for p in prompts], params, seed=1)
        requests[in_place] = [Request(p + c.token_ids + [200, 201], new_tokens) for p, c in zip(prompts, first)]
        samplers[in_place], kept[in_place] = sampler, copy.deepcopy(sampler._kept)
    for repeat in range(repeats + 1):  # the first of each is a warm-up
        for in_place in (False, True):
            sampler = samplers[in_place]
            sampler._kept = copy.deepcopy(kept[in_place])
            start = time.perf_counter()
            completions = sampler.generate(requests[in_place], params, seed=2)
            elapsed = time.perf_counter() - start
            if repeat:
                seconds[in_place].append(elapsed)
            tokens[in_place] = [c.token_ids for c in completions]
            assert sampler.reused_calls == repeat + 1, "the call did not extend the kept cache"
    median = {k: statistics.median(v) for k, v in seconds.items()}
    return {"rows": rows, "context": context, "new_tokens": new_tokens, "seconds_copying": seconds[False],
            "seconds_in_place": seconds[True], "tokens_per_s_copying": rows * new_tokens / median[False],
            "tokens_per_s_in_place": rows * new_tokens / median[True], "speedup": median[False] / median[True],
            "same_tokens": tokens[True] == tokens[False]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a named model or a local HF model directory")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 1024], help="tokens each row holds before decoding")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "kv-cache"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    directory = model_directory(args.model) if args.model in NAMED_MODELS else args.model
    model, tokenizer = load_pretrained(directory, torch.device("cpu"))
    model.eval()
    load_before = os.getloadavg()
    results = []
    for context in args.contexts:
        print(f"context {context}: {args.rows} rows x {args.new_tokens} new tokens ...", flush=True)
        results.append(measure(model, tokenizer, args.rows, context, args.new_tokens, args.repeats))
        r = results[-1]
        print(f"  copying {r['tokens_per_s_copying']:.1f} tok/s, in place {r['tokens_per_s_in_place']:.1f} tok/s, "
              f"{r['speedup']:.2f}x, same tokens {r['same_tokens']}", flush=True)
    info = {"model": args.model, "threads": args.threads, "cores": os.cpu_count(), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(), "load_average_before": load_before,
            "load_average_after": os.getloadavg()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kv_cache.json").write_text(json.dumps({"machine": info, "results": results}, indent=1))
    lines = [f"# Decoding from a kept cache: in place against copying ({args.model}, {args.threads} thread(s), "
             f"{info['date']}, load {load_before[0]:.1f} -> {info['load_average_after'][0]:.1f})", "",
             "| rows x new tokens | context | copying (tok/s) | in place (tok/s) | in place / copying | same tokens |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['rows']} x {r['new_tokens']} | {r['context']} | {r['tokens_per_s_copying']:.1f} | "
              f"{r['tokens_per_s_in_place']:.1f} | {r['speedup']:.2f}x | {r['same_tokens']} |" for r in results]
    (out / "kv_cache.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""The cost of a TEMPO update on the embedded runtime, measured in one run.

    .venv/bin/python bench/cost.py [--updates 4] [--seed 0] [--cache-dir DIR] [--model DIR]

Runs the default configuration (the bootstrapped tiny model of --seed, cached like the main job's)
for one warm-up and --updates TD updates and reports, from the same run:

- where the time goes: sampler (generation, prefill included), trainer (forward + backward +
  optimiser step), environment steps, and the rest ("overhead": restores, prompt rendering, critic
  parsing, bookkeeping), and the checkpoint written after every update (--save-every 1, the
  default), as shares of the whole time (goal: everything outside generate / forward / backward <= 3%);
- the prefill ratio: prompt tokens the sampler ran through the model over the prompt tokens of every
  request (what a sampler without a kept KV cache and without shared prompts would prefill), overall
  and for first rounds only (N branches of one start state, K samples of one critic prompt: goal
  <= 1/N + 5%);
- the trainer's share: tokens it ran through the model (a prefix shared by a micro-batch's rows
  once) over the tokens of the samples it trained, in the joint steps;
- the environment's cost per step.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempo_plugin.samplers import local as sampler_module  # noqa: E402
from tempo_plugin.config import parse_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=4, help="TD updates measured (after one warm-up update)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default="", help="bootstrap cache (default: the main job's)")
    parser.add_argument("--model", default="", help="a local Hugging Face model directory instead of the tiny model")
    args = parser.parse_args()

    timings = {"generate": 0.0, "first_round_prompt": 0, "first_round_prefill": 0}
    original = sampler_module.LocalSampler.generate

    def timed_generate(self, requests, params, seed):
        fresh = self._match_kept(requests) is None if self.reuse_cache else True
        before = (self.prompt_tokens, self.prefill_tokens)
        tic = time.perf_counter()
        try:
            return original(self, requests, params, seed)
        finally:
            timings["generate"] += time.perf_counter() - tic
            if fresh:  # a call that prefills from scratch: first rounds and critic prompts
                timings["first_round_prompt"] += self.prompt_tokens - before[0]
                timings["first_round_prefill"] += self.prefill_tokens - before[1]

    samplers: list = []
    original_init = sampler_module.LocalSampler.__post_init__

    def remember(self):
        original_init(self)
        samplers.append(self)

    sampler_module.LocalSampler.generate = timed_generate
    sampler_module.LocalSampler.__post_init__ = remember
    from tempo_plugin.embedded import multi_turn as train_module

    original_save = train_module.save_checkpoint

    def timed_save(*save_args, **save_kwargs):
        tic = time.perf_counter()
        try:
            return original_save(*save_args, **save_kwargs)
        finally:
            timings["checkpoint"] += time.perf_counter() - tic

    timings["checkpoint"] = 0.0
    train_module.save_checkpoint = timed_save
    run = train_module.run

    with tempfile.TemporaryDirectory() as out:
        argv = ["--warmup-updates", "1", "--td-updates", str(args.updates), "--eval-games", "0", "--seed", str(args.seed),
                "--out", str(Path(out) / "run")]
        argv += ["--cache-dir", args.cache_dir] if args.cache_dir else []
        argv += ["--model", args.model] if args.model else []
        cfg = parse_config(argv)
        run(cfg)
        records = [json.loads(line) for line in (Path(out) / "run" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if r.get("phase") in ("warmup", "td")]
    checkpoint = timings["checkpoint"]  # written after the update's metrics: not in time/update
    total = sum(r["time/update"] for r in updates) + checkpoint
    train = sum(r["time/train"] for r in updates)
    env = sum(r.get("time/env", 0.0) for r in updates)
    generate = timings["generate"]
    overhead = total - train - env - generate - checkpoint
    sampler = samplers[-1]
    rounds = sum(r.get("rollout/rounds", 0.0) for r in updates)
    print(f"{len(updates)} updates (1 warm-up + {args.updates} TD), seed {args.seed}, {total:.1f} s in all")
    print(f"{'part':<28} {'seconds':>8} {'share':>7}")
    for name, seconds in (("sampler (generate)", generate), ("trainer (fwd+bwd+step)", train),
                          ("environment steps", env), ("checkpoints (every update)", checkpoint),
                          ("overhead (everything else)", overhead)):
        print(f"{name:<28} {seconds:>8.2f} {seconds / total:>7.1%}")
    outside = total - generate - train
    print(f"{'outside generate/fwd/bwd':<28} {outside:>8.2f} {outside / total:>7.1%}  (goal <= 3%)")
    ratio = sampler.prefill_tokens / max(sampler.prompt_tokens, 1)
    first = timings["first_round_prefill"] / max(timings["first_round_prompt"], 1)
    print(f"prefill ratio, all calls: {sampler.prefill_tokens} / {sampler.prompt_tokens} prompt tokens = {ratio:.3f}")
    print(f"prefill ratio, calls that prefill from scratch (first rounds, critic): {first:.3f} "
          f"(goal <= 1/N + 0.05 = {1 / cfg.branches + 0.05:.3f} with N = {cfg.branches}, K = {cfg.critic_samples})")
    tokens = sum(r.get("train/tokens", 0.0) for r in updates)
    model_tokens = sum(r.get("train/model_tokens", 0.0) for r in updates)
    print(f"trainer, joint steps: {model_tokens:.0f} / {tokens:.0f} sample tokens run through the model "
          f"= {model_tokens / max(tokens, 1.0):.3f} (shared prefixes once)")
    print(f"environment: {env / max(rounds, 1) * 1e3:.3f} ms per step over {int(rounds)} steps")


if __name__ == "__main__":
    main()

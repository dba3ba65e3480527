"""Rollout throughput of the local sampler, with and without the kept KV cache.

    .venv/bin/python bench/rollout.py [--games 16] [--model DIR]
    .venv/bin/python bench/rollout.py --heldout 128 --model smollm2-135m --vaults 1 --rounds 30

Plays complete vault episodes (T = 40) with the tiny random-init model (or --model DIR) and prints
rounds/s and generated tokens/s for both prefill strategies. ``--heldout N`` times the held-out
success rate instead: N games in one sampler call (split by rows and tokens, so no kept cache, as
before waves) against ``TempoRollout.success_rate``'s waves, on the same games and model.
"""

from __future__ import annotations

import argparse
import time

import torch

from tempo_plugin.embedded.model import load_pretrained
from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.envs import make
from tempo_plugin.rollout.engine import Branch, RolloutLimits, fresh_state, run_branches
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.sampler import SamplingParams


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--games", type=int, default=16)
    parser.add_argument("--model", default="")
    parser.add_argument("--heldout", type=int, default=0, metavar="N", help="time N held-out games, one call vs waves")
    parser.add_argument("--vaults", type=int, default=1, help="with --heldout: vaults per game")
    parser.add_argument("--rounds", type=int, default=30, help="with --heldout: T, rounds per episode")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model, tokenizer = load_pretrained(args.model, torch.device("cpu"))
    else:
        from tempo_plugin.tiny.bootstrap import tokenizer_corpus
        from tempo_plugin.tiny.model import build_tiny_model, build_tokenizer

        tokenizer = build_tokenizer(tokenizer_corpus(40, games=100))
        torch.manual_seed(0)
        model = build_tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).eval()
    protocol = ChatProtocol(tokenizer)
    if args.heldout:
        heldout(model, tokenizer, protocol, args)
        return
    limits = RolloutLimits(horizon=40, max_episode_steps=40, max_trajectory_tokens=4096, max_assistant_tokens=8)
    print(f"{'prefill':<10} {'games':>5} {'rounds':>7} {'seconds':>8} {'rounds/s':>9} {'gen tok/s':>10}")
    for reuse in (False, True):
        sampler = LocalSampler(model, tokenizer, reuse_cache=reuse)
        branches = []
        for game in range(args.games):
            env = make("vault")
            branches.append(Branch.from_state(fresh_state(env, 7000 + game, protocol), env, game))
        tic = time.perf_counter()
        run_branches(branches, sampler, protocol, SamplingParams(stop_token_ids=protocol.stop_token_ids), limits, seed=0)
        seconds = time.perf_counter() - tic
        rounds = sum(len(b.rounds) for b in branches)
        generated = sum(sum(b.loss_mask) for b in branches)
        name = "kept" if reuse else "fresh"
        print(f"{name:<10} {args.games:>5} {rounds:>7} {seconds:>8.2f} {rounds / seconds:>9.1f} {generated / seconds:>10.1f}")


def heldout(model, tokenizer, protocol: ChatProtocol, args) -> None:
    """Seconds for N held-out games: every game in one call (the sampler splits it) against waves."""
    from tempo_plugin.config import TempoConfig
    from tempo_plugin.envs import env_factory
    from tempo_plugin.rollout.games import eval_games
    from tempo_plugin.updates.rollout import TempoRollout

    cfg = TempoConfig(vaults=args.vaults, max_episode_steps=args.rounds, macro_rounds=args.rounds).validate()
    games = eval_games(args.heldout)
    print(f"{'held-out':<10} {'games':>5} {'rounds':>7} {'seconds':>8} {'success':>8} {'prefill tok':>12}")
    for name in ("one call", "waves"):
        sampler = LocalSampler(model, tokenizer)
        rollout = TempoRollout(cfg, sampler, protocol, env_factory("vaults", cfg.max_episode_steps, "", cfg.vaults))
        tic = time.perf_counter()
        if name == "waves":
            success = rollout.success_rate(games, seed=0)
            rounds = "-"
        else:
            branches = rollout.play_episodes(games, seed=0)
            success = sum(b.won for b in branches) / len(branches)
            rounds = sum(len(b.rounds) for b in branches)
        seconds = time.perf_counter() - tic
        print(f"{name:<10} {len(games):>5} {rounds:>7} {seconds:>8.1f} {success:>8.3f} {sampler.prefill_tokens:>12}",
              flush=True)


if __name__ == "__main__":
    main()

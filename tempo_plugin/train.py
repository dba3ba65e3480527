"""Embedded TEMPO trainer: ``python -m tempo_plugin.train [--flags]``.

Loads the policy (a local HF model directory, or the bootstrapped built-in tiny model), measures
the base success rate on held-out games, runs the critic warm-up (Monte-Carlo targets) and the TD
phase (actor and critic in one update), then measures the final success rate. Writes to --out:
config.yaml, metrics.jsonl, curves.png, summary.json and checkpoints/latest (resume with --resume).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from tempo_plugin.backends.local.model import load_policy, load_pretrained, resolve_device
from tempo_plugin.backends.local.sampler import LocalSampler
from tempo_plugin.backends.local.trainer import PolicyTrainer
from tempo_plugin.config import ConfigError, TempoConfig, parse_config
from tempo_plugin.envs import env_factory
from tempo_plugin.metrics import SUCCESS_RATE, MetricsLog, format_table, plot_curves, summary_rows
from tempo_plugin.rollout.games import eval_games, train_game
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.updates import TempoRollout
from tempo_plugin.states.store import StateStore


@dataclass
class Progress:
    """Everything besides weights and optimiser that a resumed run needs."""

    next_update: int = 0
    game_cursor: int = 0
    base_success: float | None = None


def save_checkpoint(directory: Path, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
                    store: StateStore, progress: Progress) -> None:
    """Write to a temporary folder, then swap it in, so a crash never leaves a half checkpoint."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)  # safetensors
    tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    store.save(tmp / "store.pkl")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / "progress.json").write_text(json.dumps(progress.__dict__))
    old = directory.with_name(directory.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(directory: Path, optimizer: torch.optim.Optimizer) -> tuple[StateStore, Progress]:
    optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=False))
    rng = torch.load(directory / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    progress = Progress(**json.loads((directory / "progress.json").read_text()))
    return StateStore.load(directory / "store.pkl"), progress


def prepare_out(cfg: TempoConfig) -> Path:
    out = Path(cfg.out)
    checkpoint = out / "checkpoints" / "latest"
    if cfg.resume and not (checkpoint / "progress.json").is_file():
        raise ConfigError(f"--resume: no checkpoint in {checkpoint}; check --out")
    if not cfg.resume and (out / "metrics.jsonl").exists():
        raise ConfigError(f"--out {out} already holds a run: pass --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return out


def run(cfg: TempoConfig) -> dict[str, Any]:
    from tqdm import tqdm

    out = prepare_out(cfg)
    checkpoint = out / "checkpoints" / "latest"
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    try:
        make_env = env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data)
    except (ValueError, ImportError, FileNotFoundError) as error:
        raise ConfigError(str(error)) from None

    if cfg.resume:
        model, tokenizer = load_pretrained(str(checkpoint), device)
    else:
        bar = None
        if not cfg.model:
            bar = tqdm(total=cfg.bootstrap_steps, desc="bootstrap (tiny model, cached)", unit="step", leave=False)
        model, tokenizer = load_policy(cfg, device, progress=(lambda s, l: (bar.update(1), bar.set_postfix(loss=f"{l:.3f}"))) if bar else None)
        if bar:
            bar.close()
    model.eval()
    protocol = ChatProtocol(tokenizer)
    rollout = TempoRollout(cfg, LocalSampler(model, tokenizer), protocol, make_env)
    if cfg.freeze_embeddings:
        # Adam turns the tiny, consistent push-down gradients that every unused vocabulary row gets
        # from the softmax into full learning-rate steps; with one model in two roles this drifts
        # the actor's tokens during critic-only updates. The transformer blocks still train.
        for module in (model.get_input_embeddings(), model.get_output_embeddings()):
            module.weight.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.learning_rate, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    trainer = PolicyTrainer(model, optimizer, tokenizer.pad_token_id, cfg.temperature, cfg.eps_clip,
                            cfg.eps_clip_high, cfg.grad_clip, cfg.train_tokens_per_micro_batch)
    store = StateStore(cfg.state_store_capacity, seed=cfg.seed + 1)
    progress = Progress()
    if cfg.resume:
        store, progress = load_checkpoint(checkpoint, optimizer)
    log = MetricsLog(out / "metrics.jsonl", keep_updates_below=progress.next_update if cfg.resume else None)

    if progress.base_success is None and cfg.eval_games > 0:
        print(f"measuring the base policy's success rate on {cfg.eval_games} held-out games ...", flush=True)
        progress.base_success = rollout.success_rate(eval_games(cfg.eval_games), seed=cfg.seed)
        log.log({"phase": "eval", "update": -1, SUCCESS_RATE: progress.base_success})

    def next_game() -> int:
        progress.game_cursor += 1
        return train_game(cfg.seed, progress.game_cursor - 1)

    bar = tqdm(range(progress.next_update, cfg.total_updates), initial=progress.next_update,
               total=cfg.total_updates, desc="TEMPO", unit="update")
    for update in bar:
        tic = time.perf_counter()
        if update < cfg.warmup_updates:
            phase = "warmup"
            batch = rollout.warmup_update(update, [next_game() for _ in range(cfg.warmup_games_per_batch)])
        else:
            phase = "td"
            for group in optimizer.param_groups:
                group["lr"] = cfg.td_learning_rate
            batch = rollout.td_update(update, store.sample(cfg.states_per_batch), next_game)
        train_tic = time.perf_counter()
        train_metrics = trainer.step(batch.samples)
        train_seconds = time.perf_counter() - train_tic
        store.add(batch.new_states)
        total_seconds = time.perf_counter() - tic
        metrics = {"phase": phase, "update": update, **batch.metrics, **train_metrics, "store/size": float(len(store))}
        accounted = metrics["time/rollout"] + metrics["time/critic"] + train_seconds
        metrics.update({
            "time/train": train_seconds,
            "time/other": max(0.0, total_seconds - accounted),
            "time/update": total_seconds,
            "throughput/train_tokens_per_s": train_metrics.get("train/tokens", 0.0) / max(train_seconds, 1e-9),
        })
        log.log(metrics)
        bar.set_postfix(phase=phase, err=f"{metrics['critic/abs_error_mean']:.3f}",
                        parse_fail=f"{metrics['critic/parse_failure_rate']:.2f}")
        progress.next_update = update + 1
        if progress.next_update % cfg.save_every == 0 or progress.next_update == cfg.total_updates:
            save_checkpoint(checkpoint, model, tokenizer, optimizer, store, progress)
    bar.close()

    if cfg.eval_games > 0:
        print(f"measuring the trained policy's success rate on {cfg.eval_games} held-out games ...", flush=True)
        final = rollout.success_rate(eval_games(cfg.eval_games), seed=cfg.seed)
        log.log({"phase": "eval", "update": cfg.total_updates, SUCCESS_RATE: final})
    log.close()
    records = log.records
    rows = summary_rows(records)
    plot_curves(records, out / "curves.png")
    summary = {key: {"span": span, "first": a, "last": b} for key, span, a, b in rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(rows))
    print(f"outputs: {out}/ (metrics.jsonl, curves.png, summary.json, config.yaml, checkpoints/latest)")
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
        if not any(a == "--out" or a.startswith("--out=") for a in argv):
            if cfg.resume:
                raise ConfigError("--resume needs --out DIR naming the run to continue")
            cfg.out = f"runs/{cfg.advantage_estimator}-{time.strftime('%Y%m%d-%H%M%S')}"
        torch.set_num_threads(max(1, min(os.cpu_count() or 1, 16)))
        if cfg.advantage_estimator == "tempo":
            run(cfg)
        else:
            from tempo_plugin.single_turn import run as run_single_turn

            run_single_turn(cfg)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

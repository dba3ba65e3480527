"""Embedded TEMPO trainer: ``python -m tempo_plugin.train [--flags]``.

Loads the policy (a local HF model directory, or the bootstrapped built-in tiny model), measures
the base success rate on held-out games, runs the critic warm-up (Monte-Carlo targets) and the TD
phase (actor and critic in one update), then measures the final success rate. The held-out games
come from ``envs.eval_env_factory``: for TextWorld and ALFWorld a folder of games training never
plays (ALFWorld's ``--eval-split``), for the built-in games seeds training never reaches. With
``--advantage-estimator grpo`` and no ``--task`` the same loop runs multi-turn GRPO (complete
episodes, episode return) instead of the two phases. Writes to --out:
config.yaml, metrics.jsonl, critic_values.jsonl (the critic's estimate and target per valued state), curves.png, summary.json and checkpoints/latest (resume with --resume); with --lora-rank the checkpoint holds the adapters only.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import yaml

from tempo_plugin.backends.local.lora import apply_lora, is_adapter_dir, load_adapted, save_model
from tempo_plugin.backends.local.model import load_policy, load_pretrained, resolve_device
from tempo_plugin.backends.local.sampler import LocalSampler
from tempo_plugin.backends.local.trainer import PolicyTrainer
from tempo_plugin.config import ConfigError, TempoConfig, flag, parse_config
from tempo_plugin.envs import env_factory, eval_env_factory
from tempo_plugin.metrics import (
    ENV_STEPS,
    IDENTICAL_PATIENCE,
    IDENTICAL_WARNING,
    MC_REFRESH,
    SUCCESS_RATE,
    VALUE_PAIRS_FILE,
    MetricsLog,
    format_table,
    plot_curves,
    pooled_corr_row,
    summary_dict,
    summary_rows,
)
from tempo_plugin.rollout.games import MC_REFRESH_OFFSET, eval_games, train_game
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.samples import CRITIC
from tempo_plugin.rollout.updates import TempoRollout, UpdateBatch, mc_refresh_due, start_states
from tempo_plugin.states.store import StateStore
from tempo_plugin.wandb_log import WandbRun


@dataclass
class Progress:
    """Everything besides weights and optimiser that a resumed run needs."""

    next_update: int = 0
    game_cursor: int = 0
    base_success: float | None = None
    env_steps: int = 0  # environment steps of all training rollouts so far
    start_depths: dict[str, int] = field(default_factory=dict)  # TD start states by macro index
    identical_streak: int = 0  # consecutive updates with a collapsed critic (IDENTICAL_WARNING)


def save_checkpoint(directory: Path, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
                    store: StateStore, progress: Progress) -> None:
    """Write to a temporary folder, then swap it in, so a crash never leaves a half checkpoint.
    Everything but the weights (safetensors; with LoRA the adapters only) and the optimizer (tensors) is JSON."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, tmp)  # safetensors
    tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    store.save(tmp / "store.json")
    (tmp / "rng.json").write_text(json.dumps(rng_state()))
    (tmp / "progress.json").write_text(json.dumps(progress.__dict__))
    # At every point one complete checkpoint exists: ``directory``, or the previous one in ``.old``
    # (a run resumed from ``.old`` keeps it until the new one is in place); see checkpoint_to_resume.
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        shutil.rmtree(old, ignore_errors=True)
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def checkpoint_to_resume(directory: Path) -> Path | None:
    """``directory`` when it holds a complete checkpoint; else the previous one that
    ``save_checkpoint`` moved to ``<name>.old`` before a crash; None when there is neither."""
    for candidate in (directory, directory.with_name(directory.name + ".old")):
        if (candidate / "progress.json").is_file():
            return candidate
    return None


def rng_state() -> dict[str, Any]:
    """Python's, numpy's and torch's global RNG states as JSON-ready data."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss], "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
            "torch": torch.get_rng_state().tolist()}


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def load_checkpoint(directory: Path, optimizer: torch.optim.Optimizer) -> tuple[StateStore, Progress]:
    """Loads data only: tensors (weights_only), JSON; nothing in the checkpoint runs as code."""
    optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=True))
    set_rng_state(json.loads((directory / "rng.json").read_text()))
    progress = Progress(**json.loads((directory / "progress.json").read_text()))
    return StateStore.load(directory / "store.json"), progress


RESUMABLE_CHANGES = frozenset({"resume", "allow_config_change", "td_updates", "max_env_steps", "eval_every",
                                "save_every", "device", "cache_dir", "wandb", "wandb_project"})
"""Settings a resumed run may change without --allow-config-change: how long it runs, where and how it reports."""


def prepare_out(cfg: TempoConfig) -> Path:
    out = Path(cfg.out)
    checkpoint = out / "checkpoints" / "latest"
    if cfg.resume and checkpoint_to_resume(checkpoint) is None:
        raise ConfigError(f"--resume: no checkpoint in {checkpoint}; check --out")
    if not cfg.resume and (out / "metrics.jsonl").exists():
        raise ConfigError(f"--out {out} already holds a run: pass --resume to continue it or choose another --out")
    if cfg.resume and (out / "config.yaml").is_file() and not cfg.allow_config_change:
        saved = yaml.safe_load((out / "config.yaml").read_text()) or {}
        changed = sorted(k for k, v in cfg.to_dict().items() if k not in RESUMABLE_CHANGES and saved.get(k, v) != v)
        if changed:
            raise ConfigError(f"--resume: the settings differ from {out}/config.yaml in {', '.join(flag(k) for k in changed)}; "
                              "resume with the same settings, or pass --allow-config-change")
    resume_from = checkpoint_to_resume(checkpoint) if cfg.resume else None
    if resume_from is not None and is_adapter_dir(resume_from) != bool(cfg.lora_rank):
        held = "LoRA adapters" if is_adapter_dir(resume_from) else "full weights"
        raise ConfigError(f"--resume: {resume_from} holds {held}; resume with the run's --lora-rank")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return out


def run(cfg: TempoConfig) -> dict[str, Any]:
    from tqdm import tqdm

    out = prepare_out(cfg)
    checkpoint = out / "checkpoints" / "latest"
    resume_from = checkpoint_to_resume(checkpoint) if cfg.resume else None
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    try:
        make_env = env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data, cfg.vaults)
        # the held-out games: checked before any model is loaded, so a missing folder stops the run at once
        make_eval_env = eval_env_factory(cfg.env, cfg.max_episode_steps, cfg.env_data, cfg.vaults,
                                         cfg.eval_split) if cfg.eval_games > 0 else make_env
    except (ValueError, ImportError, FileNotFoundError) as error:
        raise ConfigError(str(error)) from None

    if cfg.resume:
        if cfg.lora_rank:  # the adapters train on; the optimizer state is theirs
            model, tokenizer = load_adapted(resume_from, device, trainable=True, cache_dir=cfg.cache_dir)
        else:
            model, tokenizer = load_pretrained(str(resume_from), device)
    else:
        bar = None
        if not cfg.model:
            bar = tqdm(total=cfg.bootstrap_steps, desc="bootstrap (tiny model, cached)", unit="step", leave=False)
        elif cfg.warm_start_steps:
            bar = tqdm(total=cfg.warm_start_steps, desc=f"warm start ({cfg.model}, cached)", unit="step", leave=False)
        model, tokenizer = load_policy(cfg, device, progress=(lambda s, l: (bar.update(1), bar.set_postfix(loss=f"{l:.3f}"))) if bar else None)
        if bar:
            bar.close()
        if cfg.lora_rank:
            # the base is the folder the weights came from when a warm start changed them, else --model
            model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets,
                               base="" if cfg.warm_start_steps else cfg.model)
    model.eval()
    protocol = ChatProtocol(tokenizer)
    rollout = TempoRollout(cfg, LocalSampler(model, tokenizer), protocol, make_env)
    eval_rollout = TempoRollout(cfg, rollout.sampler, protocol, make_eval_env)  # held-out games only
    if cfg.freeze_embeddings and not cfg.lora_rank:  # LoRA: the whole base is frozen, embeddings included
        # Adam turns the tiny, consistent push-down gradients that every unused vocabulary row gets
        # from the softmax into full learning-rate steps; with one model in two roles this drifts
        # the actor's tokens during critic-only updates. The transformer blocks still train.
        for module in (model.get_input_embeddings(), model.get_output_embeddings()):
            module.weight.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.learning_rate, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    trainer = PolicyTrainer(model, optimizer, tokenizer.pad_token_id, cfg.temperature, cfg.eps_clip,
                            cfg.eps_clip_high, cfg.grad_clip, cfg.train_tokens_per_micro_batch,
                            cfg.policy_loss)
    store = StateStore(cfg.state_store_capacity, seed=cfg.seed + 1)
    progress = Progress()
    if cfg.resume:
        store, progress = load_checkpoint(resume_from, optimizer)
    wandb_run = WandbRun(out, cfg.to_dict(), cfg.wandb_project) if cfg.wandb else None
    log = MetricsLog(out / "metrics.jsonl", keep_updates_below=progress.next_update if cfg.resume else None,
                     mirror=wandb_run.log if wandb_run else None)
    value_log = MetricsLog(out / VALUE_PAIRS_FILE, keep_updates_below=progress.next_update if cfg.resume else None)

    def evaluate(update: int, what: str) -> float:
        print(f"measuring the {what} policy's success rate on {cfg.eval_games} held-out games ...", flush=True)
        rate = eval_rollout.success_rate(eval_games(cfg.eval_games), seed=cfg.seed)
        log.log({"phase": "eval", "update": update, SUCCESS_RATE: rate, ENV_STEPS: float(progress.env_steps)})
        return rate

    if progress.base_success is None and cfg.eval_games > 0:
        progress.base_success = evaluate(-1, "base")

    def next_game() -> int:
        progress.game_cursor += 1
        return train_game(cfg.seed, progress.game_cursor - 1)

    bar = tqdm(range(progress.next_update, cfg.total_updates), initial=progress.next_update,
               total=cfg.total_updates, desc=cfg.advantage_estimator.upper(), unit="update")
    for update in bar:
        tic = time.perf_counter()
        if cfg.episode_estimator:
            phase = cfg.advantage_estimator
            for group in optimizer.param_groups:
                group["lr"] = cfg.td_learning_rate
            games = [next_game() for _ in range(cfg.states_per_batch)]
            batch = rollout.stage_update(update, games) if phase == "temporal_grpo" else rollout.episode_update(update, games)
        elif update < cfg.warmup_updates:
            phase = "warmup"
            batch = rollout.warmup_update(update, [next_game() for _ in range(cfg.warmup_games_per_batch)])
        else:
            phase = "td"
            for group in optimizer.param_groups:
                group["lr"] = cfg.td_learning_rate
            batch = rollout.td_update(update, start_states(store, cfg), next_game)
        train_tic = time.perf_counter()
        # extra critic steps in TD updates only: in the critic-only warm-up they broke the shared
        # model's action format on seed 2 (docs/experiments/critic.md, "Rewards, collapse, bootstrap")
        train_metrics = train_step(trainer, batch.samples, cfg.critic_epochs if phase == "td" else 1)
        train_seconds = time.perf_counter() - train_tic
        store.add(batch.new_states)
        total_seconds = time.perf_counter() - tic
        progress.env_steps += int(batch.metrics.get("rollout/rounds", 0))
        for depth in batch.start_depths:
            progress.start_depths[str(depth)] = progress.start_depths.get(str(depth), 0) + 1
        metrics = {"phase": phase, "update": update, **batch.metrics, **train_metrics, "store/size": float(len(store)),
                   ENV_STEPS: float(progress.env_steps)}
        accounted = metrics["time/rollout"] + metrics["time/critic"] + train_seconds
        metrics.update({
            "time/train": train_seconds,
            "time/other": max(0.0, total_seconds - accounted),
            "time/update": total_seconds,
            "throughput/train_tokens_per_s": train_metrics.get("train/tokens", 0.0) / max(train_seconds, 1e-9),
        })
        log.log(metrics)
        log_value_pairs(value_log, phase, update, batch.value_pairs)
        if phase == "td" and mc_refresh_due(cfg, update):
            refresh = mc_refresh(rollout, trainer, update, next_game)
            progress.env_steps += int(refresh.metrics.get("rollout/rounds", 0))
            log.log({"phase": MC_REFRESH, "update": update, **refresh.metrics, "store/size": float(len(store)),
                     ENV_STEPS: float(progress.env_steps)})
            log_value_pairs(value_log, MC_REFRESH, update, refresh.value_pairs)
        if cfg.episode_estimator:
            bar.set_postfix(phase=phase, success=f"{metrics['rollout/success_rate']:.2f}")
        else:
            bar.set_postfix(phase=phase, err=f"{metrics['critic/abs_error_mean']:.3f}",
                            corr=f"{metrics.get('critic/value_corr', float('nan')):.2f}")
            warn_if_critic_collapsed(metrics.get("critic/identical_group_rate", 0.0), progress, update)
        progress.next_update = update + 1
        if cfg.eval_every and cfg.eval_games > 0 and progress.next_update % cfg.eval_every == 0 \
                and progress.next_update < cfg.total_updates and not 0 < cfg.max_env_steps <= progress.env_steps:
            evaluate(progress.next_update, "current")
        out_of_budget = 0 < cfg.max_env_steps <= progress.env_steps
        if progress.next_update % cfg.save_every == 0 or progress.next_update == cfg.total_updates or out_of_budget:
            save_checkpoint(checkpoint, model, tokenizer, optimizer, store, progress)
        if out_of_budget:
            print(f"\n--max-env-steps {cfg.max_env_steps} reached after {progress.next_update} updates", flush=True)
            break
    bar.close()

    if cfg.eval_games > 0:
        evaluate(progress.next_update, "trained")
    log.close()
    value_log.close()
    records = log.records
    rows = summary_rows(records) + pooled_corr_row(value_log.records) + pooled_corr_row(value_log.records, MC_REFRESH)
    plot_curves(records, out / "curves.png")
    if wandb_run:
        wandb_run.finish(out / "curves.png")
    summary = summary_dict(rows)
    depths = dict(sorted(progress.start_depths.items(), key=lambda kv: int(kv[0])))
    summary["td/start_depth_histogram"] = depths
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(rows))
    if depths:
        print("TD start states by macro-step index (0 = fresh game): "
              + ", ".join(f"{d}: {n}" for d, n in depths.items()))
    print(f"outputs: {out}/ (metrics.jsonl, {VALUE_PAIRS_FILE}, curves.png, summary.json, config.yaml, checkpoints/latest)")
    return summary


def mc_refresh(rollout: TempoRollout, trainer: PolicyTrainer, update: int, next_game: Callable[[], int]) -> UpdateBatch:
    """The Monte-Carlo refresh after TD update ``update``: a warm-up update on fresh games (sampling
    streams of its own), trained with one step; its metrics include the step's and its times."""
    tic = time.perf_counter()
    refresh = rollout.warmup_update(update + MC_REFRESH_OFFSET, [next_game() for _ in range(rollout.cfg.warmup_games_per_batch)])
    train_tic = time.perf_counter()
    refresh.metrics.update(train_step(trainer, refresh.samples))
    refresh.metrics.update({"time/train": time.perf_counter() - train_tic, "time/update": time.perf_counter() - tic})
    return refresh


def log_value_pairs(value_log: MetricsLog, phase: str, update: int, pairs: list[tuple[float, float]]) -> None:
    if pairs:
        value_log.log({"phase": phase, "update": update, "estimate": [e for e, _ in pairs], "target": [t for _, t in pairs]})


def warn_if_critic_collapsed(identical_rate: float, progress: Progress, update: int) -> None:
    """Print a warning when the K critic samples are identical strings in most groups for
    IDENTICAL_PATIENCE updates in a row: every critic advantage is then 0 and the critic cannot
    learn, however wrong its value is."""
    progress.identical_streak = progress.identical_streak + 1 if identical_rate >= IDENTICAL_WARNING else 0
    if progress.identical_streak == IDENTICAL_PATIENCE:
        print(f"\nwarning: update {update}: the critic's K samples have been identical in >= {IDENTICAL_WARNING:.0%} "
              f"of the groups for {IDENTICAL_PATIENCE} updates; its critic advantages are 0 and it no longer learns "
              "(try a lower --learning-rate, more --critic-samples, or --temperature above 1)", file=sys.stderr, flush=True)


def train_step(trainer: PolicyTrainer, samples: list, critic_epochs: int = 1) -> dict[str, float]:
    """One update's training: the joint clipped step on all ``samples``, then ``critic_epochs - 1``
    more clipped steps on the critic samples alone (same old log-probs, so the PPO ratio clip bounds
    how far they move). Returns the joint step's metrics."""
    metrics = trainer.step(samples)
    critic_only = [s for s in samples if s.role == CRITIC]
    for _ in range(critic_epochs - 1 if critic_only else 0):
        trainer.step(critic_only)
    return metrics


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
        if not any(a == "--out" or a.startswith("--out=") for a in argv):
            if cfg.resume:
                raise ConfigError("--resume needs --out DIR naming the run to continue")
            cfg.out = f"runs/{cfg.advantage_estimator}-{time.strftime('%Y%m%d-%H%M%S')}"
        # OMP_NUM_THREADS when set (e.g. 1 per run when several runs share a few cores), else all cores up to 16
        threads = os.environ.get("OMP_NUM_THREADS", "")
        torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else max(1, min(os.cpu_count() or 1, 16)))
        if cfg.multi_turn:
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

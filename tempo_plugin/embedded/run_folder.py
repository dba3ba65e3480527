"""The embedded run folder (``--out``) and what every embedded run sets up the same way.

A run folder holds config.yaml, metrics.jsonl and, for multi-turn runs, checkpoints/latest
(weights, optimiser, state store, RNG states, ``Progress``), written so that a crash never leaves a
half checkpoint, with the one before in checkpoints/latest.prev; --resume loads the newest one
that reads back whole. ``prepare_out`` checks --out and --resume before any work starts.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import yaml

from tempo_plugin.embedded.checkpoint_integrity import checkpoint_damage
from tempo_plugin.embedded.lora import is_adapter_dir, save_model
from tempo_plugin.embedded.model import load_adapted, load_policy, load_pretrained, set_activation_checkpointing
from tempo_plugin.embedded.trainer import PolicyTrainer
from tempo_plugin.config import ConfigError, TempoConfig, flag
from tempo_plugin.estimators import ESTIMATORS
from tempo_plugin.algorithms.tempo import Calibration
from tempo_plugin.updates.tempo import AuditWindow
from tempo_plugin.metrics import PLOTTED_METRICS, MetricsLog, plot_curves, summary_dict
from tempo_plugin.runs import GENERATIVE_CRITIC_DIR
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
    audits: list[list[float]] = field(default_factory=list)  # AuditWindow.rows: (estimate, calibrated, outcome, level, update)
    trackers: dict[str, list[float]] = field(default_factory=dict)  # GameTrackers.rows: game -> (alpha, beta)


def save_checkpoint(directory: Path, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
                    store: StateStore, progress: Progress, critic: PolicyTrainer | None = None) -> None:
    """Write to a temporary folder, then swap it in, so a crash never leaves a half checkpoint.
    Everything but the weights (safetensors; with LoRA the adapters only) and the optimizer (tensors) is JSON.
    ``critic``: the separate generative critic's model and optimiser, into GENERATIVE_CRITIC_DIR (a
    model directory of its own, with the tokenizer)."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    parts = [(tmp, model, optimizer)]
    if critic is not None:
        parts.append((tmp / GENERATIVE_CRITIC_DIR, critic.model, critic.optimizer))
    for folder, weights, weights_optimizer in parts:
        folder.mkdir(exist_ok=True)
        save_model(weights, folder)  # safetensors
        tokenizer.save_pretrained(folder)
        torch.save(weights_optimizer.state_dict(), folder / "optimizer.pt")
    store.save(tmp / "store.json")
    (tmp / "rng.json").write_text(json.dumps(rng_state()))
    (tmp / "progress.json").write_text(json.dumps(progress.__dict__))
    # At every point one complete checkpoint exists: ``directory``, or the previous one in ``.old``
    # (a run resumed from ``.old`` keeps it until the new one is in place). The one before stays in
    # ``.prev``: the fallback when ``directory`` turns out damaged on --resume (see resume_checkpoint).
    old, prev = (directory.with_name(directory.name + suffix) for suffix in (".old", ".prev"))
    if directory.exists():
        shutil.rmtree(old, ignore_errors=True)
        directory.rename(old)
    tmp.rename(directory)
    if old.exists():
        shutil.rmtree(prev, ignore_errors=True)
        old.rename(prev)


CHECKPOINT_SUFFIXES = ("", ".old", ".prev")
"""Where a checkpoint may be, newest first: the last one saved, the one a save was replacing when
it crashed, the one before (``save_checkpoint``)."""


def checkpoint_candidates(directory: Path) -> list[Path]:
    """The checkpoint folders of ``directory`` that exist, newest first."""
    return [c for c in (directory.with_name(directory.name + s) for s in CHECKPOINT_SUFFIXES) if c.is_dir()]


def checkpoint_to_resume(directory: Path) -> Path | None:
    """The newest checkpoint folder that holds a ``Progress`` (None when there is none). After
    ``prepare_out`` has set damaged ones aside this is the one ``resume_checkpoint`` chose."""
    return next((c for c in checkpoint_candidates(directory) if (c / "progress.json").is_file()), None)


@dataclass
class ResumeChoice:
    """The checkpoint --resume loads, and the newer ones that are damaged (each with its problems)."""

    checkpoint: Path | None
    damaged: list[tuple[Path, list[str]]]


def resume_checkpoint(directory: Path) -> ResumeChoice:
    """The newest intact checkpoint of ``directory`` (``checkpoint_integrity``); changes nothing."""
    damaged = []
    for candidate in checkpoint_candidates(directory):
        problems = checkpoint_damage(candidate)
        if not problems:
            return ResumeChoice(candidate, damaged)
        damaged.append((candidate, problems))
    return ResumeChoice(None, damaged)


def set_aside(folder: Path) -> Path:
    """Rename a damaged checkpoint to ``<name>.damaged`` (``.damaged.N`` when taken): kept, never
    deleted, and out of the save rotation, which would otherwise replace an intact one with it."""
    target, n = folder.with_name(folder.name + ".damaged"), 1
    while target.exists():
        target, n = folder.with_name(f"{folder.name}.damaged.{n}"), n + 1
    folder.rename(target)
    return target


def damage_line(problems: list[str]) -> str:
    more = f" (and {len(problems) - 1} more problem{'s' * (len(problems) > 2)})" if len(problems) > 1 else ""
    return problems[0] + more


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


def load_checkpoint(directory: Path, optimizer: torch.optim.Optimizer,
                    critic_optimizer: torch.optim.Optimizer | None = None) -> tuple[StateStore, Progress]:
    """Loads data only: tensors (weights_only), JSON; nothing in the checkpoint runs as code.
    ``critic_optimizer``: the separate critic's, from GENERATIVE_CRITIC_DIR when it is there."""
    optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=True))
    critic_state = directory / GENERATIVE_CRITIC_DIR / "optimizer.pt"
    if critic_optimizer is not None and critic_state.is_file():
        critic_optimizer.load_state_dict(torch.load(critic_state, weights_only=True))
    set_rng_state(json.loads((directory / "rng.json").read_text()))
    progress = Progress(**json.loads((directory / "progress.json").read_text()))
    return StateStore.load(directory / "store.json"), progress


def checkpoint_calibration(directory: Path, cfg: TempoConfig) -> Calibration:
    """The calibration map (--critic-calibration) the update after a TEMPO checkpoint values with,
    fitted on the audits the checkpoint keeps; the identity where it keeps none."""
    window = AuditWindow()
    path = directory / "progress.json"
    if path.is_file():
        window.restore(Progress(**json.loads(path.read_text())).audits)
    return window.calibration(cfg)


RESUMABLE_CHANGES = frozenset({"resume", "allow_config_change", "td_updates", "max_env_steps", "eval_every",
                                "save_every", "device", "cache_dir", "wandb", "wandb_project"})
"""Settings a resumed run may change without --allow-config-change: how long it runs, where and how it reports."""


def prepare_out(cfg: TempoConfig) -> Path:
    """Check --out and --resume before any work: on --resume, the newest intact checkpoint is the
    one loaded; damaged newer ones are named on stderr and set aside (``set_aside``)."""
    out = Path(cfg.out)
    checkpoint = out / "checkpoints" / "latest"
    choice = resume_checkpoint(checkpoint) if cfg.resume else ResumeChoice(None, [])
    if cfg.resume and choice.checkpoint is None:
        if not choice.damaged:
            raise ConfigError(f"--resume: no checkpoint in {checkpoint}; check --out")
        raise ConfigError(f"--resume: {damage_line(choice.damaged[0][1])}; the run's other files are intact, but "
                          f"no earlier checkpoint is whole ({', '.join(p.name for p, _ in choice.damaged)} checked); "
                          "restore the file from a copy, or start a new --out")
    if not cfg.resume and (out / "metrics.jsonl").exists():
        raise ConfigError(f"--out {out} already holds a run: pass --resume to continue it or choose another --out")
    if cfg.resume and (out / "config.yaml").is_file() and not cfg.allow_config_change:
        saved = yaml.safe_load((out / "config.yaml").read_text()) or {}
        changed = sorted(k for k, v in cfg.to_dict().items() if k not in RESUMABLE_CHANGES and saved.get(k, v) != v)
        if changed:
            raise ConfigError(f"--resume: the settings differ from {out}/config.yaml in {', '.join(flag(k) for k in changed)}; "
                              "resume with the same settings, or pass --allow-config-change")
    resume_from = choice.checkpoint
    if resume_from is not None and is_adapter_dir(resume_from) != bool(cfg.lora_rank):
        held = "LoRA adapters" if is_adapter_dir(resume_from) else "full weights"
        raise ConfigError(f"--resume: {resume_from} holds {held}; resume with the run's --lora-rank")
    for folder, problems in choice.damaged:
        kept = set_aside(folder)
        update = json.loads((resume_from / "progress.json").read_text())["next_update"]
        print(f"warning: --resume: {damage_line(problems)}; the run's other files are intact; resuming from the earlier "
              f"checkpoint {resume_from.name} (update {update}) instead; the damaged one is kept as {kept}",
              file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return out


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's global RNGs from the run's --seed."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_policy_with_progress(cfg: TempoConfig, device: torch.device) -> tuple[Any, Any]:
    """``load_policy`` with a progress bar over the tiny model's bootstrap or a warm start (both cached)."""
    from tqdm import tqdm

    bar = None
    if not cfg.model:
        bar = tqdm(total=cfg.bootstrap_steps, desc="bootstrap (tiny model, cached)", unit="step", leave=False)
    elif cfg.warm_start_steps:
        bar = tqdm(total=cfg.warm_start_steps, desc=f"warm start ({cfg.model}, cached)", unit="step", leave=False)
    progress: Callable[[int, float], Any] | None = (
        (lambda s, l: (bar.update(1), bar.set_postfix(loss=f"{l:.3f}"))) if bar else None
    )
    model, tokenizer = load_policy(cfg, device, progress=progress)
    if bar:
        bar.close()
    return model, tokenizer


def frozen_policy(cfg: TempoConfig, device: torch.device) -> Any:
    """The policy as RL starts (``--model`` with its cached bootstrap or warm start), frozen: LVRL's
    hindsight valuer. Loaded afresh, so a resumed run reads with the same weights."""
    model, _ = load_policy(cfg, device)
    model.eval()
    model.requires_grad_(False)
    return model


def generative_critic_model(cfg: TempoConfig, policy: Any, resume_from: Path | None, device: torch.device) -> Any:
    """The separate generative critic (--critic-weights separate): on --resume the checkpoint's
    GENERATIVE_CRITIC_DIR, else (or when the checkpoint has none: a run that switched with
    --allow-config-change) a copy of the policy as it starts, trained on its own from here."""
    import copy

    saved = resume_from / GENERATIVE_CRITIC_DIR if resume_from is not None else None
    if saved is not None and saved.is_dir():
        if cfg.lora_rank:
            critic, _ = load_adapted(saved, device, trainable=True, cache_dir=cfg.cache_dir)
        else:
            critic, _ = load_pretrained(str(saved), device)
    else:
        if saved is not None:
            print(f"--resume: {saved} is missing; the critic starts as a copy of the resumed policy", file=sys.stderr)
        critic = copy.deepcopy(policy)
    critic.eval()
    return critic


def policy_trainer(cfg: TempoConfig, model: Any, tokenizer: Any, learning_rate: float) -> PolicyTrainer:
    """The policy's AdamW and its clipped policy-gradient step. With --freeze-embeddings (full
    weights only: LoRA freezes the whole base) the embeddings stay fixed: Adam turns the tiny,
    consistent push-down gradients that every unused vocabulary row gets from the softmax into full
    learning-rate steps; with one model in two roles this drifts the actor's tokens during
    critic-only updates. The transformer blocks still train."""
    if cfg.freeze_embeddings and not cfg.lora_rank:
        for module in (model.get_input_embeddings(), model.get_output_embeddings()):
            module.weight.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    if cfg.activation_checkpointing:
        set_activation_checkpointing(model, True)
    estimator = ESTIMATORS[cfg.advantage_estimator]
    gate = cfg.trajectory_kl_gate if estimator.trajectory_gate else None
    return PolicyTrainer(model, optimizer, tokenizer.pad_token_id, cfg.temperature, cfg.eps_clip,
                         cfg.eps_clip_high, cfg.grad_clip, cfg.train_tokens_per_micro_batch, cfg.policy_loss, gate,
                         estimator.ppo.divergence_clip, estimator.ppo.ratio_band_mask, cfg.score_centering)


def metrics_logs(cfg: TempoConfig, out: Path, keep_updates_below: int | None = None) -> tuple[MetricsLog, WandbRun | None]:
    """metrics.jsonl (mirrored to Weights & Biases with --wandb); on resume the records of updates
    from ``keep_updates_below`` on are dropped (they are replayed)."""
    wandb_run = WandbRun(out, cfg.to_dict(), cfg.wandb_project) if cfg.wandb else None
    log = MetricsLog(out / "metrics.jsonl", keep_updates_below=keep_updates_below,
                     mirror=wandb_run.log if wandb_run else None)
    return log, wandb_run


def write_summary(out: Path, rows: list, records: list[dict[str, Any]], wandb_run: WandbRun | None,
                  plotted: tuple[str, ...] = PLOTTED_METRICS, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """curves.png and summary.json (the table's rows, then ``extra``) from the run's records; closes
    the Weights & Biases run. Returns the summary."""
    plot_curves(records, out / "curves.png", plotted)
    if wandb_run:
        wandb_run.finish(out / "curves.png")
    summary = {**summary_dict(rows), **(extra or {})}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary

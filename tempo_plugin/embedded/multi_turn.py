"""The embedded multi-turn loop: TEMPO, multi-turn GRPO and Temporal GRPO on an environment.

Loads the policy (a local HF model directory, or the bootstrapped built-in tiny model), measures
the base success rate on held-out games, runs the updates ``updates.schedule`` names (TEMPO: the
critic warm-up with Monte-Carlo targets, then TD updates of actor and critic, each M-th followed by
a Monte-Carlo refresh; GRPO and Temporal GRPO: episode updates), then measures the final success
rate. The held-out games come from ``envs.eval_env_factory``: for TextWorld and ALFWorld a folder
of games training never plays (ALFWorld's ``--eval-split``), for the built-in games seeds training
never reaches. Writes to --out: config.yaml, metrics.jsonl, critic_values.jsonl (the critic's
estimate and target per valued state), curves.png, summary.json and checkpoints/latest (resume with
--resume); with --lora-rank the checkpoint holds the adapters only.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from tempo_plugin.embedded.lora import apply_lora
from tempo_plugin.embedded.model import load_adapted, load_pretrained, refresh_sampling_copy, resolve_device, sampling_copy
from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.embedded.trainer import PolicyTrainer, more_steps
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.embedded.run_folder import (
    Progress,
    checkpoint_to_resume,
    frozen_policy,
    generative_critic_model,
    load_checkpoint,
    load_policy_with_progress,
    metrics_logs,
    policy_trainer,
    prepare_out,
    save_checkpoint,
    seed_everything,
    write_summary,
)
from tempo_plugin.envs import env_factory, eval_env_factory
from tempo_plugin.estimators import ESTIMATORS
from tempo_plugin.updates.play import UpdateBatch
from tempo_plugin.updates.rollout import TempoRollout
from tempo_plugin.updates.schedule import TD, WARMUP, phase as update_phase, run_update
from tempo_plugin.updates.tempo import mc_refresh_due
from tempo_plugin.metrics import (
    ENV_STEPS,
    COLLAPSE_ESTIMATE_STD,
    COLLAPSE_TARGET_STD,
    IDENTICAL_PATIENCE,
    IDENTICAL_WARNING,
    MC_REFRESH,
    SUCCESS_RATE,
    VALUE_PAIRS_FILE,
    MetricsLog,
    format_table,
    pooled_corr_row,
    summary_rows,
)
from tempo_plugin.rollout.games import MC_REFRESH_OFFSET, eval_games, train_game
from tempo_plugin.rollout.protocol import ChatProtocol
from tempo_plugin.rollout.samples import CRITIC, VALUE
from tempo_plugin.states.store import StateStore


def run(cfg: TempoConfig) -> dict[str, Any]:
    from tqdm import tqdm

    out = prepare_out(cfg)
    checkpoint = out / "checkpoints" / "latest"
    resume_from = checkpoint_to_resume(checkpoint) if cfg.resume else None
    seed_everything(cfg.seed)
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
        model, tokenizer = load_policy_with_progress(cfg, device)
        if cfg.lora_rank:
            # the base is the folder the weights came from when a warm start changed them, else --model
            model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets,
                               base="" if cfg.warm_start_steps else cfg.model)
    model.eval()
    protocol = ChatProtocol(tokenizer)
    # --critic-weights separate: the critic's own copy of the weights, sampled and trained apart from the actor
    critic_trainer = None
    if cfg.critic_weights == "separate":
        critic_model = generative_critic_model(cfg, model, resume_from, device)
        critic_trainer = policy_trainer(cfg, critic_model, tokenizer, cfg.critic_learning_rate)
    # LVRL: a frozen copy of the policy as RL starts values each finished episode in hindsight
    hindsight = LocalSampler(frozen_policy(cfg, device), tokenizer) if ESTIMATORS[cfg.advantage_estimator].hindsight else None
    sampling_model = sampling_copy(model, cfg.sampler_dtype)  # --sampler-dtype bfloat16: a copy, refreshed below
    rollout = TempoRollout(cfg, LocalSampler(sampling_model, tokenizer), protocol, make_env,
                           critic_sampler=LocalSampler(critic_trainer.model, tokenizer) if critic_trainer else None,
                           hindsight_sampler=hindsight)
    eval_rollout = TempoRollout(cfg, rollout.sampler, protocol, make_eval_env)  # held-out games only
    trainer = policy_trainer(cfg, model, tokenizer, cfg.learning_rate)
    optimizer = trainer.optimizer
    store = StateStore(cfg.state_store_capacity, seed=cfg.seed + 1)
    progress = Progress()
    if cfg.resume:
        store, progress = load_checkpoint(resume_from, optimizer, critic_trainer.optimizer if critic_trainer else None)
        rollout.audits.restore(progress.audits)
        rollout.trackers.restore(progress.trackers)
    log, wandb_run = metrics_logs(cfg, out, keep_updates_below=progress.next_update if cfg.resume else None)
    value_log = MetricsLog(out / VALUE_PAIRS_FILE, keep_updates_below=progress.next_update if cfg.resume else None)

    def evaluate(update: int, what: str) -> float:
        refresh_sampling_copy(sampling_model, model)
        print(f"measuring the {what} policy's success rate on {cfg.eval_games} held-out games ...", flush=True)
        rate = eval_rollout.success_rate(eval_games(cfg.eval_games), seed=cfg.seed)
        log.log({"phase": "eval", "update": update, SUCCESS_RATE: rate, ENV_STEPS: float(progress.env_steps)})
        return rate

    if progress.base_success is None and cfg.eval_games > 0:
        progress.base_success = evaluate(-1, "base")

    def next_game() -> int:
        progress.game_cursor += 1
        return train_game(cfg.seed, progress.game_cursor - 1, cfg.train_games)

    bar = tqdm(range(progress.next_update, cfg.total_updates), initial=progress.next_update,
               total=cfg.total_updates, desc=cfg.advantage_estimator.upper(), unit="update")
    for update in bar:
        tic = time.perf_counter()
        phase = update_phase(cfg.advantage_estimator, cfg.warmup_updates, update)
        if phase != WARMUP:  # the warm-up trains at --learning-rate, every other update at --td-learning-rate
            for group in optimizer.param_groups:
                group["lr"] = cfg.td_learning_rate
        refresh_sampling_copy(sampling_model, model)
        batch = run_update(rollout, phase, update, next_game, store)
        train_tic = time.perf_counter()
        train_metrics = train_step(trainer, batch.samples, critic_epochs(cfg, phase), critic_trainer, cfg.policy_epochs)
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
        if phase == TD and mc_refresh_due(cfg, update):
            refresh_sampling_copy(sampling_model, model)
            refresh = mc_refresh(rollout, trainer, update, next_game, critic_trainer)
            progress.env_steps += int(refresh.metrics.get("rollout/rounds", 0))
            log.log({"phase": MC_REFRESH, "update": update, **refresh.metrics, "store/size": float(len(store)),
                     ENV_STEPS: float(progress.env_steps)})
            log_value_pairs(value_log, MC_REFRESH, update, refresh.value_pairs)
        if cfg.episode_estimator:
            bar.set_postfix(phase=phase, success=f"{metrics['rollout/success_rate']:.2f}")
        else:
            bar.set_postfix(phase=phase, err=f"{metrics['critic/abs_error_mean']:.3f}",
                            corr=f"{metrics.get('critic/value_corr', float('nan')):.2f}")
            warn_if_critic_collapsed(metrics, progress, update)
        progress.next_update = update + 1
        progress.audits = [list(r) for r in rollout.audits.rows]  # the readiness gate's, saved with the checkpoint
        progress.trackers = rollout.trackers.rows()  # SPO's per-game baselines, likewise
        if cfg.eval_every and cfg.eval_games > 0 and progress.next_update % cfg.eval_every == 0 \
                and progress.next_update < cfg.total_updates and not 0 < cfg.max_env_steps <= progress.env_steps:
            evaluate(progress.next_update, "current")
        out_of_budget = 0 < cfg.max_env_steps <= progress.env_steps
        if progress.next_update % cfg.save_every == 0 or progress.next_update == cfg.total_updates or out_of_budget:
            save_checkpoint(checkpoint, model, tokenizer, optimizer, store, progress, critic_trainer)
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
    depths = dict(sorted(progress.start_depths.items(), key=lambda kv: int(kv[0])))
    summary = write_summary(out, rows, records, wandb_run, extra={"td/start_depth_histogram": depths})
    print(format_table(rows))
    if depths:
        print("TD start states by macro-step index (0 = fresh game): "
              + ", ".join(f"{d}: {n}" for d, n in depths.items()))
    print(f"outputs: {out}/ (metrics.jsonl, {VALUE_PAIRS_FILE}, curves.png, summary.json, config.yaml, checkpoints/latest)")
    return summary


def mc_refresh(rollout: TempoRollout, trainer: PolicyTrainer, update: int, next_game: Callable[[], int],
               critic_trainer: PolicyTrainer | None = None) -> UpdateBatch:
    """The Monte-Carlo refresh after TD update ``update``: a warm-up update on fresh games (sampling
    streams of its own), trained as ``train_step`` trains a warm-up; its metrics include the step's
    and its times."""
    tic = time.perf_counter()
    refresh = rollout.warmup_update(update + MC_REFRESH_OFFSET, [next_game() for _ in range(rollout.cfg.warmup_games_per_batch)])
    train_tic = time.perf_counter()
    refresh.metrics.update(train_step(trainer, refresh.samples, critic_epochs(rollout.cfg, WARMUP), critic_trainer))
    refresh.metrics.update({"time/train": time.perf_counter() - train_tic, "time/update": time.perf_counter() - tic})
    return refresh


def log_value_pairs(value_log: MetricsLog, phase: str, update: int, pairs: list[tuple[float, float]]) -> None:
    if pairs:
        value_log.log({"phase": phase, "update": update, "estimate": [e for e, _ in pairs], "target": [t for _, t in pairs]})


def critic_collapsed(metrics: dict[str, float]) -> bool:
    """Whether an update's critic is collapsed: its values identical within most valued states
    (``critic/degenerate_group_rate``: the group-relative critic reward is then 0), or one value for
    every state (``critic/estimate_std`` under COLLAPSE_ESTIMATE_STD) where the targets differ
    (``critic/value_target_std`` above COLLAPSE_TARGET_STD)."""
    return _identical_within_states(metrics) or (_one_value_for_all(metrics) and _targets_differ(metrics))


def undecided(metrics: dict[str, float]) -> bool:
    """An update that can neither show a collapse nor rule one out: one value for every state where
    the targets are alike too (``critic_collapsed`` needs them to differ)."""
    return not _identical_within_states(metrics) and _one_value_for_all(metrics) and not _targets_differ(metrics)


def _identical_within_states(metrics: dict[str, float]) -> bool:
    return metrics.get("critic/degenerate_group_rate", 0.0) >= IDENTICAL_WARNING


def _one_value_for_all(metrics: dict[str, float]) -> bool:
    return metrics.get("critic/estimate_std", 1.0) < COLLAPSE_ESTIMATE_STD


def _targets_differ(metrics: dict[str, float]) -> bool:
    return metrics.get("critic/value_target_std", 0.0) > COLLAPSE_TARGET_STD


def warn_if_critic_collapsed(metrics: dict[str, float], progress: Progress, update: int) -> None:
    """Print a warning when the critic has been collapsed (``critic_collapsed``) for
    IDENTICAL_PATIENCE updates in a row: it no longer tells states apart, however wrong it is. An
    ``undecided`` update neither extends nor breaks the streak."""
    if undecided(metrics):
        return
    progress.identical_streak = progress.identical_streak + 1 if critic_collapsed(metrics) else 0
    if progress.identical_streak == IDENTICAL_PATIENCE:
        print(f"\nwarning: update {update}: the critic has given one value within >= {IDENTICAL_WARNING:.0%} of the "
              f"states it valued, or one value for every state, for {IDENTICAL_PATIENCE} updates: it no longer tells "
              "states apart and its group-relative reward is 0 (try --critic-value expected, a lower --learning-rate, "
              "or audits if they are off: --audit-weight 1)", file=sys.stderr, flush=True)


def critic_epochs(cfg: TempoConfig, phase: str) -> int:
    """The critic's optimiser steps in an update of ``phase``: --critic-epochs in TD updates; in the
    critic-only warm-up and refreshes 1 for the sampled critic (more broke the shared model's action
    format, docs/experiments/critic.md) and --critic-epochs for the expected critic, whose value
    cross-entropy trains only its answer tokens."""
    return cfg.critic_epochs if phase == TD or cfg.critic_value == "expected" else 1


def train_step(trainer: PolicyTrainer, samples: list, critic_epochs: int = 1,
               critic_trainer: PolicyTrainer | None = None, policy_epochs: int = 1) -> dict[str, float]:
    """One update's training. One model (``critic_trainer`` None): the joint clipped step on all
    ``samples``, then ``policy_epochs - 1`` more steps on the actor's samples alone (the same batch:
    ratios move off 1), then ``critic_epochs - 1`` more steps on the critic's samples alone: the sampled
    critic's (the same old log-probs, so the PPO ratio clip bounds how far they move), or the
    expected critic's value cross-entropy only (its reasoning's policy-gradient samples take the
    joint step alone: 8 clipped steps on them in a critic-only refresh broke the actor's action
    format, docs/experiments/critic-calibration.md). Returns the joint step's metrics.

    A separate critic (--critic-weights separate): the actor's samples take one step of
    ``trainer`` (none in a critic-only update: ``train/skipped``), the critic's samples ``critic_epochs`` steps of
    ``critic_trainer`` by the same rule; the critic's first step's metrics are returned as
    ``train/critic/*`` beside the actor's, its value cross-entropy as ``train/value_*``."""
    critic_roles = (CRITIC, VALUE)
    repeated = [s for s in samples if s.role == VALUE] or [s for s in samples if s.role == CRITIC]
    actor = [s for s in samples if s.role not in critic_roles]
    # one model: the joint step; a separate critic: the actor's step (none in a critic-only update: train/skipped)
    metrics = trainer.step(samples if critic_trainer is None else actor)
    metrics.update(more_steps(trainer, actor, policy_epochs - 1))
    if critic_trainer is None:
        for _ in range(critic_epochs - 1 if repeated else 0):
            trainer.step(repeated)
        return metrics
    critic = [s for s in samples if s.role in critic_roles]
    if critic:
        critic_metrics = critic_trainer.step(critic)
        for _ in range(critic_epochs - 1):
            critic_trainer.step(repeated)
        for key, value in critic_metrics.items():
            metrics[key if key.startswith("train/value_") else key.replace("train/", "train/critic/", 1)] = value
    return metrics



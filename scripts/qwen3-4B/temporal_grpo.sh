#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # the *_ARGS arrays are read by slime_launch
# Temporal GRPO for TEMPO on Qwen3-4B with slime: the same game, model, GPUs and batch sizes as
# scripts/qwen3-4B/grpo.sh, but each round of an episode gets the group-relative advantage of the
# milestone (stage) it worked on, per token, instead of the whole episode's return.
#
#   HF_CKPT=/root/Qwen3-4B REF_CKPT=/root/Qwen3-4B_torch_dist SAVE_DIR=/root/temporal-grpo-qwen3-4B \
#     bash scripts/qwen3-4B/temporal_grpo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# All environment variables (SLIME_DIR, NUM_GPUS, NUM_NODES, WANDB_KEY, ...) and the multi-node
# steps are described at the top of scripts/slime_common.sh.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../slime_common.sh
source "$RECIPE_DIR/../slime_common.sh"
slime_recipe "$RECIPE_DIR" temporal_grpo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting

# The Temporal GRPO hooks, imported from this repository (slime_common.sh puts it on the job's
# PYTHONPATH). --advantage-estimator grpo (GRPO_ARGS) keeps slime critic-free with its PPO-clip
# policy loss; the two hooks replace its reward normalisation and its advantages: the rollout puts
# each sample's per-token advantages in its metadata, the reward post-process passes them to the
# actor as the sample's rewards, and the advantage hook slices them for context parallelism
# (tempo_plugin/backends/slime/temporal_grpo.py).
PLUGIN_ARGS=(
  --rollout-function-path tempo_plugin.backends.slime.rollout.generate_temporal_grpo_rollout
  --custom-reward-post-process-path tempo_plugin.backends.slime.temporal_grpo.post_process
  --custom-advantage-function-path tempo_plugin.backends.slime.temporal_grpo.advantages
  # Keeps the global dataset on (no --disable-rollout-global-dataset), as in tempo.sh.
  --data-source-path tempo_plugin.backends.slime.data_source.TempoDataSource
  --custom-config-path "$TEMPO_CONFIG"   # the same tempo.yaml: game (env: vaults, with milestones) and episode settings
)

ROLLOUT_ARGS=(
  --num-rollout 300
  --rollout-batch-size 32       # games per rollout
  --n-samples-per-prompt 8      # episodes per game (one group per game)
  --rollout-temperature 1.0
  --global-batch-size 256       # 32 games x 8 episodes: one optimizer step per rollout
)

slime_launch "$RECIPE_NAME"

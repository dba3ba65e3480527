#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # the *_ARGS arrays are read by slime_launch
# GRPO baseline for TEMPO on Qwen3-4B with slime: the same game, model, GPUs and batch sizes as
# scripts/qwen3-4B/tempo.sh, but every sample is one whole episode, rewarded with the episode return.
#
#   HF_CKPT=/root/Qwen3-4B REF_CKPT=/root/Qwen3-4B_torch_dist SAVE_DIR=/root/grpo-qwen3-4B \
#     bash scripts/qwen3-4B/grpo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# All environment variables (SLIME_DIR, NUM_GPUS, NUM_NODES, WANDB_KEY, ...) and the multi-node
# steps are described at the top of scripts/slime_common.sh.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../slime_common.sh
source "$RECIPE_DIR/../slime_common.sh"
slime_recipe "$RECIPE_DIR" grpo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting

# The baseline hooks, imported from this repository (slime_common.sh puts it on the job's PYTHONPATH).
# The rollout hands slime each episode's group-relative advantage as its reward (the embedded
# runtime's multi-turn GRPO update), so slime's own normalisation must stay off it: the reward
# post-process of tempo.sh keeps the rewards as they are (they are centred per game already).
PLUGIN_ARGS=(
  --rollout-function-path tempo_plugin.backends.slime.rollout.generate_grpo_rollout
  --custom-reward-post-process-path tempo_plugin.backends.slime.reward.post_process
  # Keeps the global dataset on (no --disable-rollout-global-dataset), as in tempo.sh.
  --data-source-path tempo_plugin.backends.slime.data_source.TempoDataSource
  --custom-config-path "$TEMPO_CONFIG"   # the same tempo.yaml: game and episode settings
)

ROLLOUT_ARGS=(
  --num-rollout 300
  --rollout-batch-size 32       # games per rollout
  --n-samples-per-prompt 8      # episodes per game (one GRPO group)
  --rollout-temperature 1.0
  --global-batch-size 256       # 32 games x 8 episodes: one optimizer step per rollout
)

slime_launch "$RECIPE_NAME"

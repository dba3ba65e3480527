#!/usr/bin/env bash
# GRPO baseline for TEMPO on Qwen3-4B with slime: the same game, model, GPUs and batch sizes as
# scripts/qwen3-4B/tempo.sh, but every sample is one whole episode, rewarded with the episode return.
#
#   HF_CKPT=/root/Qwen3-4B REF_CKPT=/root/Qwen3-4B_torch_dist SAVE_DIR=/root/grpo-qwen3-4B \
#     bash scripts/qwen3-4B/grpo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# The method's flags: scripts/methods/grpo.sh; the TEMPO settings: scripts/methods/tempo.yaml (a
# tempo.yaml in this folder would replace it). The model's flags: scripts/models/qwen3-4B.sh and
# parallel.sh here. All environment variables (SLIME_DIR, NUM_GPUS, NUM_NODES, WANDB_KEY, ...) and
# the multi-node steps are described at the top of scripts/slime_common.sh. scripts/launch.sh runs
# the recipe.
# shellcheck source-path=SCRIPTDIR source=../launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" grpo "$@"

#!/usr/bin/env bash
# Temporal GRPO for TEMPO on Qwen3-8B with slime: the same game, model, GPUs and batch sizes as
# scripts/qwen3-8B/grpo.sh, but each round of an episode gets the group-relative advantage of the
# milestone (stage) it worked on, per token, instead of the whole episode's return.
#
#   HF_CKPT=/root/Qwen3-8B REF_CKPT=/root/Qwen3-8B_torch_dist SAVE_DIR=/root/temporal-grpo-qwen3-8B \
#     bash scripts/qwen3-8B/temporal_grpo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# The method's flags: scripts/methods/temporal_grpo.sh; the TEMPO settings:
# scripts/methods/tempo.yaml (a tempo.yaml in this folder would replace it). The model's flags:
# scripts/models/qwen3-8B.sh and parallel.sh here. All environment variables (SLIME_DIR, NUM_GPUS,
# NUM_NODES, WANDB_KEY, ...) and the multi-node steps are described at the top of
# scripts/slime_common.sh. scripts/launch.sh runs the recipe.
# shellcheck source-path=SCRIPTDIR source=../launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" temporal_grpo "$@"

#!/usr/bin/env bash
# TPPO (tracking-value PPO) on Qwen3-4B with slime, on single-turn math prompts: slime's PPO with a
# critic whose value is sigmoid(cumulative sum of its per-token head outputs), trained with BCE
# against the final reward. One node of 8 GPUs by default; Megatron training (actor and critic) and
# SGLang rollout take turns on the same GPUs (--colocate). Baseline: ppo.sh in this folder.
#
#   HF_CKPT=/root/Qwen3-4B REF_CKPT=/root/Qwen3-4B_torch_dist SAVE_DIR=/root/tppo-qwen3-4B \
#   PROMPT_DATA=data/math/train.jsonl [EVAL_DATA=data/math/test.jsonl] \
#     bash scripts/qwen3-4B/tppo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# The method's flags: scripts/methods/tppo.sh; its task (math): scripts/methods/task.sh; the
# critic's config: scripts/methods/ppo_megatron.yaml (a ppo_megatron.yaml in this folder would
# replace it). The model's flags: scripts/models/qwen3-4B.sh and parallel.sh here. All environment
# variables (SLIME_DIR, NUM_GPUS, NUM_NODES, WANDB_KEY, ...) and the multi-node steps are described
# at the top of scripts/slime_common.sh. scripts/launch.sh runs the recipe.
# shellcheck source-path=SCRIPTDIR source=../launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" tppo "$@"

#!/usr/bin/env bash
# TPPO (tracking-value PPO) on Qwen2.5-Math-1.5B with slime, on Countdown prompts: slime's PPO with a
# critic whose value is sigmoid(cumulative sum of its per-token head outputs), trained with BCE
# against the final reward. One node of 8 GPUs by default; Megatron training (actor and critic) and
# SGLang rollout take turns on the same GPUs (--colocate). Baseline: scripts/qwen3-4B/ppo.sh (math).
#
#   HF_CKPT=/root/Qwen2.5-Math-1.5B REF_CKPT=/root/Qwen2.5-Math-1.5B_torch_dist SAVE_DIR=/root/tppo-qwen2.5-math-1.5B \
#   PROMPT_DATA=data/countdown/train.jsonl [EVAL_DATA=data/countdown/test.jsonl] \
#     bash scripts/qwen2.5-math-1.5B/tppo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# The method's flags: scripts/methods/tppo.sh; its task (countdown, set below):
# scripts/methods/task.sh; the critic's config: scripts/methods/ppo_megatron.yaml (a
# ppo_megatron.yaml in this folder would replace it). The model's flags:
# scripts/models/qwen2.5-math-1.5B.sh and parallel.sh here. All environment variables (SLIME_DIR,
# NUM_GPUS, NUM_NODES, WANDB_KEY, ...) and the multi-node steps are described at the top of
# scripts/slime_common.sh. scripts/launch.sh runs the recipe.
# shellcheck disable=SC2034  # read by scripts/methods/task.sh
TASK=countdown   # the single-turn task (scripts/methods/task.sh); ppo and tppo default to math
# shellcheck source-path=SCRIPTDIR source=../launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" tppo "$@"

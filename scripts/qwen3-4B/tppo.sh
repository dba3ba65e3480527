#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # the *_ARGS arrays are read by slime_launch
# TPPO (tracking-value PPO) on Qwen3-4B with slime, on single-turn math prompts: slime's PPO with a
# critic whose value is sigmoid(cumulative sum of its per-token head outputs), trained with BCE
# against the final reward. One node of 8 GPUs by default; Megatron training (actor and critic) and
# SGLang rollout take turns on the same GPUs (--colocate). Baseline: ppo.sh in this folder.
#
#   HF_CKPT=/root/Qwen3-4B REF_CKPT=/root/Qwen3-4B_torch_dist SAVE_DIR=/root/tppo-qwen3-4B \
#   PROMPT_DATA=data/math/train.jsonl [EVAL_DATA=data/math/test.jsonl] \
#     bash scripts/qwen3-4B/tppo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# All environment variables (SLIME_DIR, NUM_GPUS, NUM_NODES, WANDB_KEY, ...) and the multi-node
# steps are described at the top of scripts/slime_common.sh.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../slime_common.sh
source "$RECIPE_DIR/../slime_common.sh"
SLIME_PROMPT_DATA_HINT="python data/prepare_math.py (see that script for its options)"
slime_recipe "$RECIPE_DIR" tppo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting
slime_megatron_config "$RECIPE_DIR/ppo_megatron.yaml"   # MEGATRON_CONFIG: critic lr, gamma, lambd, checkpoints

# The TPPO hooks, imported from this repository (slime_common.sh puts it on the job's PYTHONPATH).
PLUGIN_ARGS=(
  --custom-rm-path tempo_plugin.backends.slime.rewards.math_reward   # 1 for a correct final answer, else 0
  # Runs on every training rank of actor and critic before the models are built: replaces the
  # critic's value loss (clipped MSE) by BCE between sigmoid(cumsum of head outputs) and the return.
  --custom-megatron-init-path tempo_plugin.backends.slime.tppo.init
  # Actor only (slime clears it for the critic): values = sigmoid(cumsum of the critic's head
  # outputs), then GAE with the actor's --gamma/--lambd (slime_ppo_args).
  --custom-advantage-function-path tempo_plugin.backends.slime.tppo.advantages
)

# math_reward needs math-verify, which slime's image lacks: Ray installs it for the job (runtime env).
mapfile -t JOB_PIP < <(slime_extra_requirements math)
slime_ppo_args math 4096   # ROLLOUT_ARGS, EVAL_ARGS, PPO_ARGS
# No --normalize-advantages: whitening would rescale the tracked-value advantages.

slime_launch "$RECIPE_NAME"

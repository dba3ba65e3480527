#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2034  # the *_ARGS arrays are read by slime_launch
# PPO baseline for TPPO on Qwen3-4B with slime: the same prompts, model, GPUs, batch sizes and
# megatron config as scripts/qwen3-4B/tppo.sh, but slime's own critic (clipped MSE value loss,
# one value per token) and advantage computation.
#
#   HF_CKPT=/root/Qwen3-4B REF_CKPT=/root/Qwen3-4B_torch_dist SAVE_DIR=/root/ppo-qwen3-4B \
#   PROMPT_DATA=data/math/train.jsonl [EVAL_DATA=data/math/test.jsonl] \
#     bash scripts/qwen3-4B/ppo.sh [--dry-run] [extra slime flags, e.g. --num-rollout 10]
#
# All environment variables (SLIME_DIR, NUM_GPUS, NUM_NODES, WANDB_KEY, ...) and the multi-node
# steps are described at the top of scripts/slime_common.sh.
set -euo pipefail
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../slime_common.sh
source "$RECIPE_DIR/../slime_common.sh"
SLIME_PROMPT_DATA_HINT="python data/prepare_math.py (see that script for its options)"
slime_recipe "$RECIPE_DIR" ppo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting
slime_megatron_config "$RECIPE_DIR/ppo_megatron.yaml"   # MEGATRON_CONFIG: critic lr, gamma, lambd, checkpoints

# Only the reward hook: no TPPO hooks, so the critic and the advantages are slime's own.
PLUGIN_ARGS=(
  --custom-rm-path tempo_plugin.backends.slime.rewards.math_reward   # 1 for a correct final answer, else 0
)

# math_reward needs math-verify, which slime's image lacks: Ray installs it for the job (runtime env).
mapfile -t JOB_PIP < <(slime_extra_requirements math)
slime_ppo_args math 4096   # ROLLOUT_ARGS, EVAL_ARGS, PPO_ARGS (lambd 0.95, as tppo.sh: only the critic differs)
PPO_ARGS+=(--normalize-advantages)   # whiten the advantages over the batch, as slime's PPO test does

slime_launch "$RECIPE_NAME"

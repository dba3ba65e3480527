# shellcheck shell=bash disable=SC2034  # the *_ARGS arrays are read by slime_launch
# TPPO (tracking-value PPO) with slime, on single-turn prompts: the flags of every
# scripts/<model>/tppo.sh, sourced by scripts/launch.sh with the recipe's arguments. slime's PPO with
# a critic whose value is sigmoid(cumulative sum of its per-token head outputs), trained with BCE
# against the final reward. One node of 8 GPUs by default; Megatron training (actor and critic) and
# SGLang rollout take turns on the same GPUs (--colocate). The task (prompts, reward) is the recipe's
# TASK (task.sh). Baseline: ppo.sh.
# shellcheck source-path=SCRIPTDIR source=task.sh
source "$TEMPO_ROOT/scripts/methods/task.sh"   # SLIME_PROMPT_DATA_HINT, TASK_REWARD, TASK_MAX_RESPONSE_LEN, JOB_PIP
slime_recipe "$RECIPE_DIR" tppo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting
slime_megatron_config "$(slime_recipe_file "$RECIPE_DIR" ppo_megatron.yaml)"   # MEGATRON_CONFIG: critic lr, gamma, lambd, checkpoints

# The TPPO hooks, imported from this repository (slime_common.sh puts it on the job's PYTHONPATH).
PLUGIN_ARGS=(
  --custom-rm-path "$TASK_REWARD"
  # Runs on every training rank of actor and critic before the models are built: replaces the
  # critic's value loss (clipped MSE) by BCE between sigmoid(cumsum of head outputs) and the return.
  --custom-megatron-init-path tempo_plugin.slime.tppo.init
  # Actor only (slime clears it for the critic): values = sigmoid(cumsum of the critic's head
  # outputs), then GAE with the actor's --gamma/--lambd (slime_ppo_args).
  --custom-advantage-function-path tempo_plugin.slime.tppo.advantages
)

slime_ppo_args "$TASK" "$TASK_MAX_RESPONSE_LEN"   # ROLLOUT_ARGS, EVAL_ARGS, PPO_ARGS
# No --normalize-advantages: whitening would rescale the tracked-value advantages.

# shellcheck shell=bash disable=SC2034  # the *_ARGS arrays are read by slime_launch
# PPO baseline for TPPO with slime: the flags of every scripts/<model>/ppo.sh, sourced by
# scripts/launch.sh with the recipe's arguments. The same prompts, model, GPUs, batch sizes and
# megatron config as the model's tppo.sh, but slime's own critic (clipped MSE value loss, one value
# per token) and advantage computation. The task (prompts, reward) is the recipe's TASK (task.sh).
# shellcheck source-path=SCRIPTDIR source=task.sh
source "$TEMPO_ROOT/scripts/methods/task.sh"   # SLIME_PROMPT_DATA_HINT, TASK_REWARD, TASK_MAX_RESPONSE_LEN, JOB_PIP
slime_recipe "$RECIPE_DIR" ppo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting
slime_megatron_config "$(slime_recipe_file "$RECIPE_DIR" ppo_megatron.yaml)"   # MEGATRON_CONFIG: critic lr, gamma, lambd, checkpoints

# Only the reward hook: no TPPO hooks, so the critic and the advantages are slime's own.
PLUGIN_ARGS=(
  --custom-rm-path "$TASK_REWARD"
)

slime_ppo_args "$TASK" "$TASK_MAX_RESPONSE_LEN"   # ROLLOUT_ARGS, EVAL_ARGS, PPO_ARGS (lambd 0.95, as tppo.sh: only the critic differs)
PPO_ARGS+=(--normalize-advantages)   # whiten the advantages over the batch, as slime's PPO test does

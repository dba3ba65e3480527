# shellcheck shell=bash disable=SC2034  # read by slime_init and the ppo and tppo methods
# The single-turn task of the ppo and tppo methods, sourced by them before slime_recipe. TASK names
# it: the recipe sets it (scripts/qwen2.5-math-1.5B/tppo.sh: countdown), math when unset. Sets
#   SLIME_PROMPT_DATA_HINT  how to make PROMPT_DATA (slime_init names it when PROMPT_DATA is missing)
#   TASK_REWARD             the reward hook (--custom-rm-path)
#   TASK_MAX_RESPONSE_LEN   --rollout-max-response-len
#   JOB_PIP                 packages Ray installs for the job (runtime env), if any
# TASK itself names the eval set (--eval-prompt-data TASK EVAL_DATA).
TASK=${TASK:-math}
case "$TASK" in
  math)
    SLIME_PROMPT_DATA_HINT="python data/prepare_math.py (see that script for its options)"
    TASK_REWARD=tempo_plugin.slime.rewards.math_reward   # 1 for a correct final answer, else 0
    TASK_MAX_RESPONSE_LEN=4096
    # math_reward needs math-verify, which slime's image lacks: Ray installs it for the job (runtime env).
    mapfile -t JOB_PIP < <(slime_extra_requirements math)
    ;;
  countdown)
    SLIME_PROMPT_DATA_HINT="python -m tempo_plugin.tasks.countdown --out data/countdown/train.jsonl --count 20000 --seed 0"
    TASK_REWARD=tempo_plugin.slime.rewards.countdown_reward   # 1 for an equation that reaches the target, else 0
    TASK_MAX_RESPONSE_LEN=1024   # Countdown answers are short (Qwen2.5-Math-1.5B's context is 4096)
    ;;
  *)
    echo "error: TASK=$TASK is not a task of the single-turn recipes: set it to math or countdown" >&2
    exit 2
    ;;
esac

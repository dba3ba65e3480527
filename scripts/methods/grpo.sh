# shellcheck shell=bash disable=SC2034  # the *_ARGS arrays are read by slime_launch
# GRPO baseline for TEMPO with slime: the flags of every scripts/<model>/grpo.sh, sourced by
# scripts/launch.sh with the recipe's arguments. The same game, model, GPUs and batch sizes as the
# model's tempo.sh, but every sample is one whole episode, rewarded with the episode return.
slime_recipe "$RECIPE_DIR" grpo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting

# The baseline hooks, imported from this repository (slime_common.sh puts it on the job's PYTHONPATH).
# The rollout hands slime each episode's group-relative advantage as its reward (the embedded
# runtime's multi-turn GRPO update), so slime's own normalisation must stay off it: the reward
# post-process of tempo.sh keeps the rewards as they are (they are centred per game already).
PLUGIN_ARGS=(
  --rollout-function-path tempo_plugin.slime.rollout.generate_grpo_rollout
  --custom-reward-post-process-path tempo_plugin.slime.reward.post_process
  # Keeps the global dataset on (no --disable-rollout-global-dataset), as in tempo.sh.
  --data-source-path tempo_plugin.slime.data_source.TempoDataSource
  --custom-config-path "$TEMPO_CONFIG"   # the same tempo.yaml: game and episode settings
)

ROLLOUT_ARGS=(
  --num-rollout 300
  --rollout-batch-size 32       # games per rollout
  --n-samples-per-prompt 8      # episodes per game (one GRPO group)
  --rollout-temperature 1.0
  --global-batch-size 256       # 32 games x 8 episodes: one optimizer step per rollout
)

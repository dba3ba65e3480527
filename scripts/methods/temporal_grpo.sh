# shellcheck shell=bash disable=SC2034  # the *_ARGS arrays are read by slime_launch
# Temporal GRPO for TEMPO with slime: the flags of every scripts/<model>/temporal_grpo.sh, sourced by
# scripts/launch.sh with the recipe's arguments. The same game, model, GPUs and batch sizes as the
# model's grpo.sh, but each round of an episode gets the group-relative advantage of the milestone
# (stage) it worked on, per token, instead of the whole episode's return.
slime_recipe "$RECIPE_DIR" temporal_grpo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting

# The Temporal GRPO hooks, imported from this repository (slime_common.sh puts it on the job's
# PYTHONPATH). --advantage-estimator grpo (GRPO_ARGS) keeps slime critic-free with its PPO-clip
# policy loss; the two hooks replace its reward normalisation and its advantages: the rollout puts
# each sample's per-token advantages in its metadata, the reward post-process passes them to the
# actor as the sample's rewards, and the advantage hook slices them for context parallelism
# (tempo_plugin/slime/temporal_grpo.py).
PLUGIN_ARGS=(
  --rollout-function-path tempo_plugin.slime.rollout.generate_temporal_grpo_rollout
  --custom-reward-post-process-path tempo_plugin.slime.temporal_grpo.post_process
  --custom-advantage-function-path tempo_plugin.slime.temporal_grpo.advantages
  # Keeps the global dataset on (no --disable-rollout-global-dataset), as in tempo.sh.
  --data-source-path tempo_plugin.slime.data_source.TempoDataSource
  --custom-config-path "$TEMPO_CONFIG"   # the same tempo.yaml: game (env: vaults, with milestones) and episode settings
)

ROLLOUT_ARGS=(
  --num-rollout 300
  --rollout-batch-size 32       # games per rollout
  --n-samples-per-prompt 8      # episodes per game (one group per game)
  --rollout-temperature 1.0
  --global-batch-size 256       # 32 games x 8 episodes: one optimizer step per rollout
)

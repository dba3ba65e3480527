# shellcheck shell=bash disable=SC2034  # the *_ARGS arrays are read by slime_launch
# TEMPO with slime: the flags of every scripts/<model>/tempo.sh, sourced by scripts/launch.sh with
# the recipe's arguments. One node of 8 GPUs by default, Megatron training and SGLang rollout taking
# turns on the same GPUs (--colocate). The TEMPO settings are in tempo.yaml (here, unless the model
# folder has its own).
slime_recipe "$RECIPE_DIR" tempo "$@"   # model, parallel and shared arrays; exits 2 on a missing setting

# The TEMPO hooks, imported from this repository (slime_common.sh puts it on the job's PYTHONPATH).
PLUGIN_ARGS=(
  --rollout-function-path tempo_plugin.slime.rollout.generate_rollout
  --custom-reward-post-process-path tempo_plugin.slime.reward.post_process
  # The data source holds TEMPO's state store. slime saves and restores it with the checkpoint only
  # while the global dataset is on, so do NOT add --disable-rollout-global-dataset.
  --data-source-path tempo_plugin.slime.data_source.TempoDataSource
  --custom-config-path "$TEMPO_CONFIG"   # environment and critic settings (tempo.yaml)
)

# Do not add --log-passrate or --num-steps-per-rollout: both assume a rollout holds exactly
# rollout-batch-size x n-samples-per-prompt samples, and a TEMPO rollout holds more (see below).
ROLLOUT_ARGS=(
  --num-rollout 300
  --rollout-batch-size 32       # S: start states per rollout
  --n-samples-per-prompt 8      # N: branches played from each start state
  --rollout-temperature 1.0
  # Samples per optimizer step. A rollout yields S*critic_samples samples during warm-up
  # (32*8 = 256) and S*(N+critic_samples) afterwards (32*(8+8) = 512); both must be multiples.
  --global-batch-size 256
)

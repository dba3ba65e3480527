#!/usr/bin/env bash
# TPPO on the tiny Countdown task with the built-in tiny model, on CPU (about 5 minutes on 2 cores,
# a first run included). Extra arguments go to the trainer and win, e.g.
#   bash scripts/tiny/tppo.sh --advantage-estimator ppo --out runs/ppo
#   bash scripts/tiny/tppo.sh --advantage-estimator grpo
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/bootstrap_env.sh"
cd "$ROOT"
TPPO_ARGS=(
  --advantage-estimator tppo
  --task countdown
  --states-per-batch 16        # problems per update
  --branches 4                 # responses per problem
  --warmup-updates 10          # critic-only updates first
  --td-updates 30              # then actor and critic together
  --max-assistant-tokens 16    # an answer is at most ~13 tokens
  --critic-learning-rate 1e-3
  --eval-games 64              # held-out problems for the accuracy before and after
)
exec "$VENV/bin/python" -m tempo_plugin.train "${TPPO_ARGS[@]}" "$@"

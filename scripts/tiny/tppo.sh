#!/usr/bin/env bash
# TPPO on the tiny letters task with the built-in tiny model, on CPU (under 10 minutes on 2 cores from
# a fresh clone, install and bootstrap included: docs/experiments/single-turn.md). Extra arguments go
# to the trainer and win, e.g.
#   bash scripts/tiny/tppo.sh --seed 1 --out runs/tppo-seed1
#   bash scripts/tiny/tppo.sh --advantage-estimator ppo --out runs/ppo
#   bash scripts/tiny/tppo.sh --advantage-estimator grpo
#   bash scripts/tiny/tppo.sh --task countdown --max-assistant-tokens 16   # the tiny Countdown
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/bootstrap_env.sh"
cd "$ROOT"
TPPO_ARGS=(
  --advantage-estimator tppo
  --task letters               # the trainer's own default is countdown (config.py)
  --bootstrap-steps 300        # supervised bootstrap of the tiny model (cached per seed)
  --states-per-batch 16        # problems per update
  --branches 4                 # responses per problem: 64 per update
  --warmup-updates 20          # critic-only updates first
  --td-updates 40              # then actor and critic together
  --max-assistant-tokens 12    # an answer is at most 10 tokens (<answer>, 7 letters, </answer>, end)
  --critic-learning-rate 1e-3
  --critic-epochs 4            # critic optimiser steps per batch (why 4: docs/experiments/single-turn.md)
  --td-learning-rate 5e-5      # the actor's
  --eval-games 128             # held-out problems for the accuracy before and after
)
exec "$VENV/bin/python" -m tempo_plugin.train "${TPPO_ARGS[@]}" "$@"

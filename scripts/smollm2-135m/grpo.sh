#!/usr/bin/env bash
# Multi-turn GRPO with SmolLM2-135M-Instruct on the built-in vault chain, on the embedded runtime:
# the baseline of scripts/smollm2-135m/tempo.sh, with the same model, warm start, LoRA and
# environment-step budget (complete episodes per game, the episode return as every token's reward).
# Extra arguments go to the trainer and win, e.g.
#   bash scripts/smollm2-135m/grpo.sh --seed 1 --out runs/smollm2-grpo-seed1
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
smollm2_train --advantage-estimator grpo "${SMOLLM2_GRPO_ARGS[@]}" "$@"

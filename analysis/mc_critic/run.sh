#!/usr/bin/env bash
# How good is a critic, measured against Monte Carlo (--help: every option):
#   bash analysis/mc_critic/run.sh runs/<name> [--critic-model DIR] [options]
# Relative paths are taken from the directory you run it in.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/bootstrap_env.sh"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$VENV/bin/python" -m analysis.mc_critic "$@"

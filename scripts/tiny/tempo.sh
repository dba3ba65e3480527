#!/usr/bin/env bash
# TEMPO on the built-in vault game with the tiny model, on CPU. Extra arguments go to the trainer,
# e.g.  bash scripts/tiny/tempo.sh --td-updates 20 --out runs/x
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/bootstrap_env.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m tempo_plugin.train "$@"

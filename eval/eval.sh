#!/usr/bin/env bash
# Evaluate runs, models and servers side by side (greedy and pass@k on agent games and math sets).
#   bash eval/eval.sh runs/<name> [more runs or model directories] [options]    (--help: every option)
# Relative paths are taken from the directory you run it in.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TEMPO_VENV:-$ROOT/.venv}"
if [ -z "${TEMPO_EXTRAS:-}" ]; then
  # math-verify scores the math benchmarks: reuse an install that already has the math extra, else add it.
  TEMPO_EXTRAS=math
  for stamp in "$VENV"/.tempo-installed-*; do
    case "${stamp##*/.tempo-installed-}" in *math*) TEMPO_EXTRAS="${stamp##*/.tempo-installed-}";; esac
  done
fi
export TEMPO_EXTRAS
source "$ROOT/scripts/bootstrap_env.sh"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$VENV/bin/python" -m eval "$@"

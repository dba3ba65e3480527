#!/usr/bin/env bash
# Create .venv if missing, install the project with its test dependencies, run the test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TEMPO_EXTRAS=test,math source "$ROOT/scripts/bootstrap_env.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest -q "$@"

#!/usr/bin/env bash
# Create .venv if missing, install the project with its test dependencies, run the test suite.
# TEMPO_EXTRAS=test,math,textworld,alfworld also installs the environments (CI does; about 2 min cold).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TEMPO_EXTRAS="${TEMPO_EXTRAS:-test,math}" source "$ROOT/scripts/bootstrap_env.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest -q "$@"

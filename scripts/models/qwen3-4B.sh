# shellcheck shell=bash disable=SC2034
# Megatron architecture flags for Qwen3-4B (values from the model's Hugging Face config.json).
# Sourced by the recipes; it only defines MODEL_ARGS.
MODEL_ARGS=(
  --num-layers 36
  --hidden-size 2560
  --ffn-hidden-size 9728
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
  # The 4B model ties its input embedding and output layer, so no --untie-embeddings-and-output-weights.
)

# Qwen3's chat template answers in thinking mode unless told otherwise. The single-turn recipes turn
# it off (slime's --apply-chat-template-kwargs): thinking responses often run past the 4096-token
# response cap before the boxed answer, and a cut response scores 0. The TEMPO recipes render
# their prompts with enable_thinking=False as well (tempo_plugin.rollout.protocol).
CHAT_TEMPLATE_KWARGS='{"enable_thinking":false}'

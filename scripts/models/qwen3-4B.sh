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

# shellcheck shell=bash disable=SC2034
# Megatron architecture flags for Qwen2.5-Math-1.5B (the Qwen2.5-1.5B architecture; values from the
# model's Hugging Face config.json, as in slime's scripts/models/qwen2.5-1.5B.sh).
# Sourced by the recipes; it only defines MODEL_ARGS.
MODEL_ARGS=(
  --num-layers 28
  --hidden-size 1536
  --ffn-hidden-size 8960
  --swiglu
  --num-attention-heads 12
  --group-query-attention
  --num-query-groups 2
  --normalization RMSNorm
  --norm-epsilon 1e-6
  --use-rotary-position-embeddings
  --rotary-base 10000
  --disable-bias-linear   # no bias in the MLP and output projections ...
  --add-qkv-bias          # ... but Qwen2.5 does have biases on the query, key and value projections
  --vocab-size 151936
  # The 1.5B model ties its input embedding and output layer, so no --untie-embeddings-and-output-weights.
  # No --qk-layernorm: that is new in Qwen3. The model's context is 4096 tokens (max_position_embeddings).
)

# shellcheck shell=bash disable=SC2034
# Megatron architecture flags for Qwen3-8B (values from the model's Hugging Face config.json).
# Sourced by the recipes; it only defines MODEL_ARGS and CHAT_TEMPLATE_KWARGS (scripts/models/qwen3.sh).
# shellcheck source=qwen3.sh
source "$(dirname "${BASH_SOURCE[0]}")/qwen3.sh"
# 36 layers, hidden 4096, FFN 12288; unlike the 4B model, the 8B model has a separate output layer.
qwen3_model_args 36 4096 12288 untie

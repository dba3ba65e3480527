# shellcheck shell=bash disable=SC2034
# Megatron architecture flags for Qwen3-4B (values from the model's Hugging Face config.json).
# Sourced by the recipes; it only defines MODEL_ARGS and CHAT_TEMPLATE_KWARGS (scripts/models/qwen3.sh).
# shellcheck source=qwen3.sh
source "$(dirname "${BASH_SOURCE[0]}")/qwen3.sh"
# 36 layers, hidden 2560, FFN 9728; the 4B model ties its input embedding and output layer.
qwen3_model_args 36 2560 9728

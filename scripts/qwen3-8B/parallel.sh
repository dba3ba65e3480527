# shellcheck shell=bash
# How Qwen3-8B is spread over one 8-GPU node (slime_parallel_args in scripts/slime_common.sh);
# sourced for every recipe in this folder.
# - Each layer split over 2 GPUs: 4 data-parallel replicas and 4 SGLang engines on 8 GPUs, as in
#   slime's colocated 8-GPU Qwen3-8B example.
# - Packed micro-batches of up to 18432 tokens.
# - SGLang keeps 0.4 of each GPU's memory, low so that Megatron's resident memory fits beside the 8B
#   model; raise it (append --sglang-mem-fraction-static 0.7) if memory allows.
# - Every layer's activations are recomputed in the backward pass.
slime_parallel_args 2 18432 0.4 recompute

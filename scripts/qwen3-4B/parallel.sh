# shellcheck shell=bash
# How Qwen3-4B is spread over one 8-GPU node (slime_parallel_args in scripts/slime_common.sh);
# sourced for every recipe in this folder.
# - Each layer split over 2 GPUs: 4 data-parallel replicas and 4 SGLang engines on 8 GPUs.
# - Packed micro-batches of up to 9216 tokens: above the longest trajectory (max_trajectory_tokens = 8192).
# - SGLang keeps 0.7 of each GPU's memory.
# - Every layer's activations are recomputed in the backward pass.
slime_parallel_args 2 9216 0.7 recompute

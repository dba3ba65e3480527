# shellcheck shell=bash
# How Qwen2.5-Math-1.5B is spread over one 8-GPU node (slime_parallel_args in
# scripts/slime_common.sh); sourced for every recipe in this folder.
# - The model and its critic copy fit on one GPU each: no tensor parallelism, 8 data-parallel
#   replicas and 8 SGLang engines on 8 GPUs. slime requires the actor and the critic to share this
#   topology.
# - Packed micro-batches of up to 9216 tokens: above the longest sample (prompt + --rollout-max-response-len).
# - SGLang keeps 0.7 of each GPU's memory.
# - No activation recomputation: at 1.5B the activations of a 9216-token micro-batch fit. Append
#   --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 if memory runs short.
slime_parallel_args 1 9216 0.7

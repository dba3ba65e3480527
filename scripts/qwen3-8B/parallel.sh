# shellcheck shell=bash disable=SC2034  # the arrays are read by slime_launch
# How Qwen3-8B is spread over one 8-GPU node: Megatron parallelism and SGLang engine size.
# Sourced for every recipe in this folder (slime_recipe in scripts/slime_common.sh).

PERF_ARGS=(
  # Megatron splits each layer over 2 GPUs (4 data-parallel replicas on 8 GPUs), as in slime's
  # colocated 8-GPU Qwen3-8B example; sequence parallelism shards the activations between the same 2.
  --tensor-model-parallel-size 2
  --sequence-parallel
  --pipeline-model-parallel-size 1
  --context-parallel-size 1
  # Recompute every layer's activations in the backward pass: memory for longer packed batches.
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  # Pack samples into micro-batches of at most this many tokens per GPU instead of a fixed
  # micro-batch size; it must exceed the longest trajectory (max_trajectory_tokens = 8192).
  --use-dynamic-batch-size
  --max-tokens-per-gpu 18432
)

SGLANG_ARGS=(
  --rollout-num-gpus-per-engine 2   # each SGLang engine spans 2 GPUs: 4 engines on 8 GPUs
  --sglang-mem-fraction-static 0.4  # GPU memory share for SGLang weights + KV cache; kept low for the
                                    # 8B model so Megatron's resident memory fits beside it. Raise it
                                    # (e.g. append --sglang-mem-fraction-static 0.7) if memory allows.
)

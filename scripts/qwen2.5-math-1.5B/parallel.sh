# shellcheck shell=bash disable=SC2034  # the arrays are read by slime_launch
# How Qwen2.5-Math-1.5B is spread over one 8-GPU node: Megatron parallelism and SGLang engine size.
# Sourced for every recipe in this folder (slime_recipe in scripts/slime_common.sh).

PERF_ARGS=(
  # The model and its critic copy fit on one GPU each, so no tensor parallelism: 8 data-parallel
  # replicas on 8 GPUs (and no --sequence-parallel, which only applies with TP > 1). slime requires
  # the actor and the critic to share this topology.
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 1
  --context-parallel-size 1
  # No activation recomputation: at 1.5B the activations of a 9216-token micro-batch fit. Append
  # --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 if memory runs short.
  # Pack samples into micro-batches of at most this many tokens per GPU instead of a fixed
  # micro-batch size; it must exceed the longest sample (prompt + --rollout-max-response-len).
  --use-dynamic-batch-size
  --max-tokens-per-gpu 9216
)

SGLANG_ARGS=(
  --rollout-num-gpus-per-engine 1   # one SGLang engine per GPU: 8 engines on 8 GPUs
  --sglang-mem-fraction-static 0.7  # GPU memory share for SGLang weights + KV cache; the rest stays
                                    # free for what Megatron keeps resident while colocated
)

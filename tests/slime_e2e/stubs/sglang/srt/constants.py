"""Test-only stand-in for sglang.srt.constants (GPU-only package): the memory-type tags slime.ray.rollout imports at module level."""

GPU_MEMORY_TYPE_KV_CACHE = "kv_cache"
GPU_MEMORY_TYPE_WEIGHTS = "weights"
GPU_MEMORY_TYPE_CUDA_GRAPH = "cuda_graph"

"""Test-only stand-in for torch_memory_saver (CUDA-only package): slime's Megatron actor imports its singleton at module level; offloading is off in rollout-only runs, so nothing is called."""


class _MemorySaver:
    def __getattr__(self, name):
        raise NotImplementedError(f"torch_memory_saver.{name}: GPU memory offloading is not available on CPU")


torch_memory_saver = _MemorySaver()

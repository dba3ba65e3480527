"""Test-only stand-in for sglang.srt.utils.patch_torch (GPU-only package): slime imports monkey_patch_torch_reductions for CUDA-IPC weight updates, which rollout-only runs never do."""


def monkey_patch_torch_reductions() -> None:
    pass

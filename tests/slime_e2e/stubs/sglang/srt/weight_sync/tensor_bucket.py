"""Test-only stand-in for sglang.srt.weight_sync.tensor_bucket (GPU-only package): slime imports FlattenedTensorBucket for tensor weight updates, which rollout-only runs never do."""


class FlattenedTensorBucket:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("the CPU end-to-end test does not update SGLang weights")

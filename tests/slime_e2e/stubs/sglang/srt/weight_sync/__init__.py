"""Test-only stand-in for sglang.srt.weight_sync (GPU-only package): a namespace for tensor_bucket."""

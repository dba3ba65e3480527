"""Test-only stand-in for sglang.srt (GPU-only): a namespace for the stubbed submodules slime imports."""

"""Test-only CPU backend for slime.utils.accelerator (stands in for slime's CUDA backend, slime/utils/accelerator/cuda.py): slime's Ray actors ask for a device even in rollout-only mode, and CI has no GPU."""

from __future__ import annotations

import os

import torch
from slime.utils.accelerator.base import Accelerator


class CPUAccelerator(Accelerator):
    name = "cpu"
    device_type = "cpu"
    communication_backend_name = "gloo"

    def is_available(self) -> bool:
        return True

    def device(self, index=None) -> torch.device:
        return torch.device("cpu")

    def device_name(self, index=None) -> str:
        return "cpu"

    def set_device(self, index) -> None:
        pass

    def current_device(self) -> int:
        return 0  # the one "GPU" the test's Ray cluster declares

    def device_count(self) -> int:
        return 1

    def synchronize(self, device=None) -> None:
        pass

    def current_stream(self, device=None):
        return None

    def empty_cache(self) -> None:
        pass

    def mem_get_info(self, device=None) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    def memory_allocated(self, device=None) -> int:
        return 0

    def memory_reserved(self, device=None) -> int:
        return 0


def register(accelerator_module) -> None:
    """Add the backend to slime's registry under the name SLIME_ACCELERATOR selects."""
    accelerator_module.register_accelerator("cpu", CPUAccelerator, lambda: True, priority=0)

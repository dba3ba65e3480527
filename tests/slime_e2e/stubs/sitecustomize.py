"""Test-only site hook (stands in for no real module): in the processes of slime's CPU end-to-end test it registers the CPU accelerator with slime.utils.accelerator as soon as slime imports that package, because slime ships only CUDA and MUSA backends and every Ray worker must see the registration."""

# Python imports ``sitecustomize`` at start-up from the first sys.path entry that holds it; the
# test puts this folder on PYTHONPATH of `ray start` (so of every Ray worker) and of train.py.
# Nothing happens unless SLIME_ACCELERATOR=cpu, so other processes sharing the variable are untouched.

import importlib.abc
import importlib.machinery
import os
import sys

_TARGET = "slime.utils.accelerator"


class _RegisteringLoader(importlib.abc.Loader):
    """Runs the real package, then registers the CPU backend into its registry."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        import cpu_accelerator  # noqa: PLC0415 (only once slime's base class exists)

        cpu_accelerator.register(module)


class _AcceleratorFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


if os.environ.get("SLIME_ACCELERATOR", "").lower() == "cpu":
    sys.meta_path.insert(0, _AcceleratorFinder())

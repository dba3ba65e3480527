"""Run slime's own RolloutManager train-data path on pickled rollout outputs, without Ray or SGLang.

Used by tests/test_slime_train_data.py as a SUBPROCESS (``python tests/slime_stub_imports.py SPEC``),
because the import stubs below replace whole packages in ``sys.modules``:

- ``install_stubs()`` puts a ``sys.meta_path`` finder first that answers every import of ray, sglang,
  sglang_router, wandb, tensorboardX, torch_memory_saver and pynvml (and their submodules) with an
  empty package whose attributes are ``MagicMock``s. ``ray.remote`` is an identity decorator, so
  ``slime.ray.rollout.RolloutManager`` stays a plain class, and ``ray.put`` returns its argument, so
  the ``Box`` es that ``_split_train_data_by_dp`` returns hold each DP rank's rollout_data itself.
- ``main(spec)`` makes a RolloutManager without running ``__init__`` (no engines, no router) and
  sets what ``__init__`` would have set for the three methods that run here:
  ``_get_rollout_data`` (calls the rollout function, checks rollout ids, flattens the groups),
  ``_convert_samples_to_train_data`` (reward post-process, loss masks, per-rollout mask sums) and
  ``_split_train_data_by_dp`` (build_dp_schedule, per-rank packaging, tensorisation).
  It prints one JSON object with what came out; the test asserts on it.

Nothing of slime is copied here: slime is imported from PYTHONPATH.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import pickle
import sys
import types
from unittest import mock

STUBBED = ("ray", "sglang", "sglang_router", "wandb", "tensorboardX", "torch_memory_saver", "pynvml")


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        if module.__name__ == "ray":
            module.remote = lambda *a, **k: a[0] if a and callable(a[0]) else (lambda c: c)
            module.put = lambda value, **kwargs: value


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


def install_stubs() -> None:
    sys.meta_path.insert(0, _StubFinder())


def _tolist(value):
    return value.tolist() if hasattr(value, "tolist") else value


def run_case(case: dict) -> dict:
    from slime.ray.rollout import RolloutManager
    from slime.utils.misc import load_function

    with open(case["pickle"], "rb") as f:
        output = pickle.load(f)  # slime's RolloutFnTrainOutput, as our rollout function returned it

    args = types.SimpleNamespace(**case["args"])
    manager = RolloutManager.__new__(RolloutManager)
    manager.args = args
    # as RolloutManager.__init__ sets them
    manager.generate_rollout = lambda args, rollout_id, data_source, evaluation=False: output
    manager.data_source = None
    manager.custom_reward_post_process_func = None
    if args.custom_reward_post_process_path is not None:
        manager.custom_reward_post_process_func = load_function(args.custom_reward_post_process_path)
    manager.custom_convert_samples_to_train_data_func = None

    samples, _metrics = manager._get_rollout_data(rollout_id=case["rollout_id"])
    train_data = manager._convert_samples_to_train_data(samples)
    result = {
        "num_samples": len(samples),
        "keys": sorted(train_data),
        "train_data": {key: [_tolist(v) for v in value] for key, value in train_data.items()},
        "splits": [],
    }
    for parallel in case["splits"]:
        for key, value in parallel["args"].items():
            setattr(args, key, value)
        manager.set_train_parallel_config(parallel["train_parallel_config"])
        boxes = manager._split_train_data_by_dp(dict(train_data))
        ranks = []
        for box in boxes:
            rank = box.inner
            ranks.append(
                {
                    key: (
                        [_tolist(v) for v in value]
                        if isinstance(value, list)
                        else _tolist(value)
                    )
                    for key, value in rank.items()
                }
                | {
                    "tensor_keys": sorted(
                        key for key, value in rank.items() if isinstance(value, list) and value and hasattr(value[0], "dtype")
                    )
                }
            )
        result["splits"].append({"name": parallel["name"], "ranks": ranks})
    return result


def main(spec_path: str) -> None:
    install_stubs()
    with open(spec_path) as f:
        spec = json.load(f)
    print(json.dumps({case["name"]: run_case(case) for case in spec["cases"]}))


if __name__ == "__main__":
    main(sys.argv[1])

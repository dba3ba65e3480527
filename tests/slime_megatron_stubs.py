"""Load slime's megatron_utils ``loss`` / ``cp_utils`` on CPU with ``megatron.core.mpu`` stubbed.

slime's own CPU tests do the same: they put empty ``megatron`` / ``megatron.core`` modules in
``sys.modules`` whose ``mpu`` answers the few parallel-state questions those modules ask. Here the
stub is a module whose context-parallel size and rank can be changed after loading (``set_cp``),
because slime's modules bind ``mpu`` once at import. Nothing of slime is copied; slime is imported
from PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
import warnings

SLIME_MODULES = ("slime.backends.megatron_utils.loss", "slime.backends.megatron_utils.cp_utils")


def make_mpu(cp_size: int = 1, cp_rank: int = 0, cp_group=None) -> types.ModuleType:
    mpu = types.ModuleType("megatron.core.mpu")
    mpu.get_data_parallel_world_size = lambda with_context_parallel=False: cp_size if with_context_parallel else 1
    mpu.is_pipeline_last_stage = lambda *a, **k: True
    # tensor parallel size 1: slime's vocab-parallel log-prob asks for the group (None: the default
    # group, or no all-reduce at all without a process group)
    mpu.get_tensor_model_parallel_group = lambda *a, **k: None
    mpu.get_tensor_model_parallel_world_size = lambda: 1
    mpu.get_tensor_model_parallel_rank = lambda: 0
    set_cp(mpu, cp_size, cp_rank, cp_group)
    return mpu


def set_cp(mpu: types.ModuleType, cp_size: int, cp_rank: int, cp_group=None) -> None:
    mpu.get_context_parallel_world_size = lambda: cp_size
    mpu.get_context_parallel_rank = lambda: cp_rank
    mpu.get_context_parallel_group = lambda: cp_group
    mpu.get_data_parallel_world_size = lambda with_context_parallel=False: cp_size if with_context_parallel else 1


@contextlib.contextmanager
def slime_megatron_utils(mpu: types.ModuleType):
    """Yield (loss, cp_utils) freshly imported against ``mpu``; restore ``sys.modules`` afterwards."""
    names = ("megatron", "megatron.core", "megatron.core.mpu", *SLIME_MODULES)
    saved = {name: sys.modules.get(name) for name in names}
    megatron = types.ModuleType("megatron")
    core = types.ModuleType("megatron.core")
    core.mpu = mpu
    megatron.core = core
    sys.modules.update({"megatron": megatron, "megatron.core": core, "megatron.core.mpu": mpu})
    for name in SLIME_MODULES:
        sys.modules.pop(name, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # slime warns that its megatron patches are not applied
            cp_utils = importlib.import_module("slime.backends.megatron_utils.cp_utils")
            loss = importlib.import_module("slime.backends.megatron_utils.loss")
        yield loss, cp_utils
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


# --------------------------------------------------------------------------------------------------
# A context-parallel rank in its own process (gloo), for tests/test_slime_tppo.py:
#     python tests/slime_megatron_stubs.py RANK WORLD_SIZE PORT CASE.pt OUT.pt
# CASE.pt holds {"total_lengths", "response_lengths", "heads" (per sample, the head output at every
# position of the sequence), "loss_masks", "returns" (full length), "rewards", "gamma", "lambd"}.
# The rank builds its local [1, T_local, 1] head output the way slime's CP forward lays it out
# (per sample: its chunk r, then its chunk 2 * cp - 1 - r, each chunk_size long), runs TPPO's
# value loss with slime's CP reducer and backward, and TPPO's advantage hook on its local values.


def _cp_rank_main(rank: int, world: int, port: int, case_path: str, out_path: str) -> None:
    import os
    from argparse import Namespace

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    case = torch.load(case_path)
    mpu = make_mpu(world, rank, dist.group.WORLD)
    with slime_megatron_utils(mpu) as (_, cp_utils):
        from tempo_plugin.slime import tppo

        pieces, local_returns, local_values, local_kl = [], [], [], []
        for total, resp, head, ret in zip(
            case["total_lengths"], case["response_lengths"], case["heads"], case["returns"]
        ):
            chunk_size, chunks, _, _ = cp_utils.get_logits_and_tokens_offset_with_cp(total, resp)
            padded = torch.cat([head, head.new_zeros(2 * world * chunk_size - total)])
            pieces += [padded[a:b] for a, b in chunks]
            f_full = head[total - resp - 1 : total - 1]
            local_values.append(cp_utils.slice_log_prob_with_cp(f_full, total, resp))
            local_returns.append(cp_utils.slice_log_prob_with_cp(ret, total, resp))
            local_kl.append(torch.zeros_like(local_values[-1]))
        logits = torch.cat(pieces).reshape(1, -1, 1).requires_grad_(True)
        batch = {
            "unconcat_tokens": [torch.zeros(t, dtype=torch.long) for t in case["total_lengths"]],
            "total_lengths": case["total_lengths"],
            "response_lengths": case["response_lengths"],
            "loss_masks": case["loss_masks"],
            "returns": local_returns,
        }
        reducer = cp_utils.get_sum_of_sample_mean(case["total_lengths"], case["response_lengths"], case["loss_masks"])
        args = Namespace(gamma=1.0, lambd=1.0, allgather_cp=False, rollout_temperature=1.0, kl_coef=0.0)
        loss, metrics = tppo.value_loss(args, batch, logits, reducer)
        loss.backward()
        rollout_data = {
            "values": local_values,
            "loss_masks": case["loss_masks"],
            "rewards": case["rewards"],
            "total_lengths": case["total_lengths"],
            "response_lengths": case["response_lengths"],
            "kl": local_kl,
        }
        tppo.advantages(Namespace(gamma=case["gamma"], lambd=case["lambd"], kl_coef=0.0), rollout_data)
        torch.save(
            {
                "loss": loss.detach(),
                "value_mean": metrics["tppo_value_mean"],
                "grad": logits.grad.reshape(-1),
                "advantages": rollout_data["advantages"],
                "returns": rollout_data["returns"],
            },
            out_path,
        )
    dist.barrier()  # every rank has written its result before any tears down
    dist.destroy_process_group()


if __name__ == "__main__":
    _cp_rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    # Exit without interpreter teardown: under load, gloo's and autograd's C++ threads could abort the
    # process there ("terminate called without an active exception") after the result was written.
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(0)

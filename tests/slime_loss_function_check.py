"""Run slime's ``loss_function`` on CPU with megatron-core's real parallel state (run as a subprocess
by tests/test_slime_loss_function.py, so the process group and the module stubs stay out of pytest).

    python tests/slime_loss_function_check.py CASE.pt OUT.pt

What happens here, in order:

1. ``torch.distributed.init_process_group("gloo")`` on a file store, world size 1, then
   ``megatron.core.parallel_state.initialize_model_parallel(1, 1)``: tensor, pipeline and context
   parallel size 1. slime's ``loss`` / ``cp_utils`` are then imported against the real
   ``megatron.core.mpu`` (``megatron.core.parallel_state``); the tensor-parallel group that slime's
   vocab-parallel log-prob hands to ``dist.all_reduce`` is megatron's real gloo group. Should a step
   fail, the failure (step, call, exception) goes into the output and the run falls back to the
   ``mpu`` stub of tests/slime_megatron_stubs.py, so the comparisons still run.
2. slime's arguments: slime's own argument definitions with their defaults, parsed from the policy
   flags of the recipes (scripts/slime_common.sh, ``GRPO_ARGS``), then the per-case overrides.
3. Policy cases (CASE["policy_cases"]): the tiny policy (CASE["policy_state"]) runs on each
   sample separately (what Megatron's packed THD attention computes), the per-sample logits are
   concatenated with a padding run up to a multiple of ``--data-pad-size-multiplier`` (slime's
   ``get_batch`` layout), slime's ``compute_advantages_and_returns`` turns the rewards into
   advantages, and ``loss_function`` (``loss_type = "policy_loss"``) runs and back-propagates.
   Old log-probs are the sampler's (``--use-rollout-logprobs``) or, slime's default, recomputed by
   slime's ``get_log_probs_and_entropy`` on the same logits (slime's separate log-prob pass).
4. Critic case (CASE["critic_case"]): ``tppo.init`` (megatron.training stubbed, as in
   tests/slime_critic_head_check.py) rebinds slime's ``value_loss_function``; the tiny critic
   (``ValueModel``, CASE["critic_state"]) gives the [1, T, 1] head output; slime's
   ``compute_advantages_and_returns`` (PPO, gamma = lambd = 1, kl_coef 0, as in the critic) gives the
   returns; ``loss_function`` (``loss_type = "value_loss"``) runs and back-propagates.

OUT.pt receives, per case: the scaled loss, the reported metrics, the logits and their gradient,
and the gradient of every model parameter. One JSON line on stdout says how the parallel state was
set up and what ran. Nothing of slime is copied; slime is imported from PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from argparse import Namespace

HERE = os.path.dirname(os.path.abspath(__file__))

# The policy flags every TEMPO / GRPO recipe passes (scripts/slime_common.sh, GRPO_ARGS).
RECIPE_POLICY_FLAGS = [
    "--advantage-estimator", "grpo",
    "--use-kl-loss", "--kl-loss-coef", "0.00", "--kl-loss-type", "low_var_kl",
    "--entropy-coef", "0.00",
    "--eps-clip", "0.2", "--eps-clip-high", "0.28",
]  # fmt: skip


def _failure(step: str, call: str, error: BaseException) -> dict:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return {"step": step, "call": call, "error": f"{type(error).__name__}: {error}", "raised_at": where}


def setup_parallel_state(info: dict):
    """Real megatron-core parallel state on a one-rank gloo group; else the stub. Returns the mpu."""
    import torch.distributed as dist

    info["real_parallel_state"] = False
    if os.environ.get("TEMPO_SLIME_LOSS_CHECK_STUB"):  # to exercise the fallback by hand
        info["failure"] = {"step": "forced", "call": "TEMPO_SLIME_LOSS_CHECK_STUB is set", "error": "", "raised_at": ""}
        return _stub_mpu(info)
    try:
        store = os.path.join(tempfile.mkdtemp(prefix="slime_loss_check_"), "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    except Exception as error:  # noqa: BLE001 - reported, then the stub
        info["failure"] = _failure("process group", 'torch.distributed.init_process_group("gloo", world_size=1)', error)
        return _stub_mpu(info)
    try:
        from megatron.core import parallel_state

        parallel_state.initialize_model_parallel(1, 1)
    except Exception as error:  # noqa: BLE001
        info["failure"] = _failure(
            "parallel state", "megatron.core.parallel_state.initialize_model_parallel(1, 1)", error
        )
        return _stub_mpu(info)
    from megatron.core import mpu

    tp_group = mpu.get_tensor_model_parallel_group()
    info.update(
        real_parallel_state=True,
        backend=dist.get_backend(),
        world_size=dist.get_world_size(),
        tp_world_size=mpu.get_tensor_model_parallel_world_size(),
        tp_group_size=tp_group.size(),
        pp_world_size=mpu.get_pipeline_model_parallel_world_size(),
        cp_world_size=mpu.get_context_parallel_world_size(),
        dp_cp_world_size=mpu.get_data_parallel_world_size(with_context_parallel=True),
        pipeline_last_stage=mpu.is_pipeline_last_stage(),
    )
    return mpu


def _stub_mpu(info: dict):
    import types

    from slime_megatron_stubs import make_mpu

    mpu = make_mpu()
    info["mpu_fallback"] = "tests/slime_megatron_stubs.py make_mpu()"
    try:  # keep a real megatron package importable (tppo.init needs megatron.core.transformer)
        import megatron.core  # noqa: F401

        sys.modules["megatron.core"].mpu = mpu
    except ImportError:
        megatron = types.ModuleType("megatron")
        core = types.ModuleType("megatron.core")
        core.mpu, megatron.core = mpu, core
        sys.modules.update({"megatron": megatron, "megatron.core": core})
    sys.modules["megatron.core.mpu"] = mpu
    return mpu


def slime_args(**overrides) -> Namespace:
    import argparse

    from slime_parse_args import stub_sglang

    stub_sglang()
    from slime.utils.arguments import get_slime_extra_args_provider

    parser = argparse.ArgumentParser(allow_abbrev=False)
    get_slime_extra_args_provider()(parser)
    args, _ = parser.parse_known_args(RECIPE_POLICY_FLAGS + ["--rollout-batch-size", "1"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def packed_outputs(run, samples, pad_multiplier: int, pad_id: int):
    """[1, T_padded, *] model outputs: each sample on its own, then a padding run (slime's get_batch
    pads the packed stream to a multiple of the pad size; Megatron sees the padding as one more
    sequence)."""
    import torch

    pieces = [run(torch.tensor(s["tokens"])) for s in samples]
    total = sum(len(s["tokens"]) for s in samples)
    pad = (pad_multiplier - total % pad_multiplier) % pad_multiplier
    if pad:
        pieces.append(run(torch.full((pad,), pad_id, dtype=torch.long)))
    return torch.cat(pieces, dim=0).unsqueeze(0), pad


def sample_fields(samples: list[dict]) -> tuple[list, list[int], list[int], list]:
    """slime's per-sample fields of the samples: tokens, total and response lengths, response loss masks."""
    import torch

    tokens = [torch.tensor(s["tokens"], dtype=torch.long) for s in samples]
    total_lengths = [len(s["tokens"]) for s in samples]
    response_lengths = [len(s["tokens"]) - s["prompt_length"] for s in samples]
    loss_masks = [torch.tensor(s["loss_mask"][s["prompt_length"]:], dtype=torch.int) for s in samples]
    return tokens, total_lengths, response_lengths, loss_masks


def loss_and_gradients(loss_mod, args, batch: dict, case: dict, logits, model, pad: int) -> dict:
    """slime's loss_function on ``batch``, backpropagated: the loss, its log and the gradients."""
    import torch

    scaled, normalizer, log = loss_mod.loss_function(args, batch, 1, case["step_global_batch_size"], logits)
    scaled.backward()
    return {
        "loss": scaled.detach(),
        "normalizer": torch.as_tensor(normalizer).detach(),
        "metrics": dict(zip(log["keys"], log["values"][1:].tolist())),
        "logits": logits.detach(),
        "logits_grad": logits.grad.detach(),
        "param_grads": {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None},
        "pad": pad,
    }


def run_policy_case(loss_mod, policy, case: dict, pad_multiplier: int, pad_id: int) -> dict:
    import torch

    samples = case["samples"]
    args = slime_args(**case["args"])
    policy.zero_grad(set_to_none=True)
    logits, pad = packed_outputs(lambda t: policy(input_ids=t[None]).logits[0].float(), samples, pad_multiplier, pad_id)
    logits.retain_grad()
    tokens, total_lengths, response_lengths, loss_masks = sample_fields(samples)
    rollout_log_probs = [torch.tensor(s["logprobs"][s["prompt_length"]:], dtype=torch.float32) for s in samples]
    # slime's separate log-prob pass on the same weights (actor's compute_log_prob, no grad)
    with torch.no_grad():
        _, recomputed = loss_mod.get_log_probs_and_entropy(
            logits.detach(), args=args, unconcat_tokens=tokens, total_lengths=total_lengths,
            response_lengths=response_lengths,
        )  # fmt: skip
    rollout_data = {
        "tokens": tokens,
        "total_lengths": total_lengths,
        "response_lengths": response_lengths,
        "loss_masks": loss_masks,
        "rewards": [float(s["reward"]) for s in samples],
        "rollout_log_probs": rollout_log_probs,
        "log_probs": recomputed["log_probs"],
        "ref_log_probs": [lp.clone() for lp in recomputed["log_probs"]],  # the reference = the start weights
    }
    loss_mod.compute_advantages_and_returns(args, rollout_data)
    batch = {
        "tokens": torch.cat(tokens + [torch.full((pad,), pad_id, dtype=torch.long)]).unsqueeze(0),
        "unconcat_tokens": tokens,
        "total_lengths": total_lengths,
        "response_lengths": response_lengths,
        "loss_masks": loss_masks,
        "advantages": rollout_data["advantages"],
        "returns": rollout_data["returns"],
        "rollout_log_probs": rollout_log_probs,
        "log_probs": None if args.use_rollout_logprobs else rollout_data["log_probs"],
        "ref_log_probs": rollout_data["ref_log_probs"],
        "values": None,
        "rollout_mask_sums": torch.tensor(case["rollout_mask_sums"], dtype=torch.float32),
    }
    return {
        **loss_and_gradients(loss_mod, args, batch, case, logits, policy, pad),
        "advantages": [a.detach() for a in rollout_data["advantages"]],
        "recomputed_log_probs": [lp.detach() for lp in recomputed["log_probs"]],
    }


def run_critic_case(loss_mod, critic, case: dict, pad_multiplier: int, pad_id: int, info: dict) -> dict:
    import torch

    from tempo_plugin.slime import tppo

    before = loss_mod.value_loss_function
    try:
        from slime_critic_head_check import stub_megatron_training

        stub_megatron_training()
        tppo.init(Namespace())
    except Exception as error:  # noqa: BLE001 - the head patch needs megatron.core.transformer
        info["critic_init_failure"] = _failure("tppo.init", "tempo_plugin.slime.tppo.init", error)
        loss_mod.value_loss_function = tppo.value_loss
    info["value_loss_was_slimes"] = getattr(before, "__module__", "") == loss_mod.__name__
    info["value_loss_patched"] = loss_mod.value_loss_function is tppo.value_loss

    samples = case["samples"]
    args = slime_args(**case["args"])
    critic.zero_grad(set_to_none=True)
    logits, pad = packed_outputs(
        lambda t: critic(t[None], torch.ones(1, len(t), dtype=torch.long))[0].float().unsqueeze(-1),
        samples, pad_multiplier, pad_id,
    )  # fmt: skip
    logits.retain_grad()
    tokens, total_lengths, response_lengths, loss_masks = sample_fields(samples)
    with torch.no_grad():  # the critic's value pass before its training step
        _, old = loss_mod.get_values(
            logits.detach(), args=args, unconcat_tokens=tokens, total_lengths=total_lengths,
            response_lengths=response_lengths,
        )  # fmt: skip
    rollout_data = {
        "tokens": tokens,
        "total_lengths": total_lengths,
        "response_lengths": response_lengths,
        "loss_masks": loss_masks,
        "rewards": [float(s["reward"]) for s in samples],
        "values": old["values"],
    }
    loss_mod.compute_advantages_and_returns(args, rollout_data)  # slime's PPO GAE, as in the critic
    batch = {
        "unconcat_tokens": tokens,
        "total_lengths": total_lengths,
        "response_lengths": response_lengths,
        "loss_masks": loss_masks,
        "values": old["values"],
        "returns": rollout_data["returns"],
        "rollout_mask_sums": torch.tensor(case["rollout_mask_sums"], dtype=torch.float32),
    }
    return {
        **loss_and_gradients(loss_mod, args, batch, case, logits, critic, pad),
        "returns": [r.detach() for r in rollout_data["returns"]],
    }


def main(case_path: str, out_path: str) -> None:
    warnings.simplefilter("ignore")
    sys.path.insert(0, HERE)
    start = time.time()
    # one inductor compile worker: slime's loss helpers are torch.compile'd, and on a 2-core machine the
    # default worker pool costs more (about 10 s cold) than it saves
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    info: dict = {}
    mpu = setup_parallel_state(info)
    import slime.backends.megatron_utils.loss as loss_mod

    info["slime_mpu"] = getattr(loss_mod.mpu, "__name__", repr(loss_mod.mpu))
    info["slime_mpu_is_parallel_state"] = info["slime_mpu"] == "megatron.core.parallel_state"
    info["slime_mpu_is_ours"] = loss_mod.mpu is mpu

    from tempo_plugin.critic.value_model import value_model_from_policy
    from tempo_plugin.tiny.model import build_tiny_model

    case = torch.load(case_path)
    model = case["model"]
    policy = build_tiny_model(model["vocab_size"], model["pad_id"], model["eos_id"])
    policy.load_state_dict(case["policy_state"])
    policy.train()  # what slime's training step runs (no dropout in the tiny Qwen3)
    critic = value_model_from_policy(policy)
    critic.load_state_dict(case["critic_state"])
    critic.train()

    out: dict = {"policy": {}, "info": info}
    for name, policy_case in case["policy_cases"].items():
        out["policy"][name] = run_policy_case(loss_mod, policy, policy_case, case["pad_multiplier"], model["pad_id"])
    out["critic"] = run_critic_case(
        loss_mod, critic, case["critic_case"], case["pad_multiplier"], model["pad_id"], info
    )
    from torch._dynamo.utils import counters

    info["compiled_graphs"] = int(counters["stats"]["unique_graphs"])  # slime's torch.compile'd helpers ran compiled
    info["seconds"] = round(time.time() - start, 1)
    info["cases"] = {
        name: {"loss": r["loss"].item(), "keys": sorted(r["metrics"])} for name, r in out["policy"].items()
    }
    info["cases"]["critic"] = {"loss": out["critic"]["loss"].item(), "keys": sorted(out["critic"]["metrics"])}
    torch.save(out, out_path)
    if info.get("real_parallel_state"):
        import torch.distributed as dist
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    print(json.dumps(info))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown under gloo's threads (see tests/slime_megatron_stubs.py)

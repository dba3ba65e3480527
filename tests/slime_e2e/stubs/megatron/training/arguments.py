"""Test-only stand-in for megatron.training.arguments (Megatron-LM only): parse_args builds a parser with the Megatron flags slime reads on its rollout-only path, adds slime's own flags, and parses the command line."""

from __future__ import annotations

import argparse

# (flag, argparse keywords): Megatron's flags, with Megatron's defaults, that slime reads without
# defining them itself (slime's own flags, and the Megatron ones it re-defaults, come from the
# extra_args_provider slime passes in).
_MEGATRON_FLAGS: list[tuple[str, dict]] = [
    ("--fp16", {"action": "store_true"}),
    ("--bf16", {"action": "store_true"}),
    ("--seq-length", {"type": int, "default": None}),
    ("--max-position-embeddings", {"type": int, "default": None}),
    ("--multi-latent-attention", {"action": "store_true"}),
    ("--vocab-size", {"type": int, "default": None}),
    ("--make-vocab-size-divisible-by", {"type": int, "default": 128}),
    ("--tokenizer-model", {"type": str, "default": None}),
    ("--tokenizer-type", {"type": str, "default": None}),
    ("--ckpt-step", {"type": int, "default": None}),
    ("--no-load-optim", {"action": "store_true"}),
    ("--no-load-rng", {"action": "store_true"}),
    ("--no-save-optim", {"action": "store_true"}),
    ("--finetune", {"action": "store_true"}),
    ("--tensor-model-parallel-size", {"type": int, "default": 1}),
    ("--pipeline-model-parallel-size", {"type": int, "default": 1}),
    ("--context-parallel-size", {"type": int, "default": 1}),
    ("--expert-model-parallel-size", {"type": int, "default": 1}),
    ("--sequence-parallel", {"action": "store_true"}),
    ("--decoder-first-pipeline-num-layers", {"type": int, "default": None}),
    ("--decoder-last-pipeline-num-layers", {"type": int, "default": None}),
    ("--moe-token-dispatcher-type", {"type": str, "default": "allgather"}),
    ("--num-layers", {"type": int, "default": None}),
    ("--hidden-size", {"type": int, "default": None}),
    ("--ffn-hidden-size", {"type": int, "default": None}),
    ("--num-attention-heads", {"type": int, "default": None}),
    ("--num-query-groups", {"type": int, "default": None}),
    ("--kv-channels", {"type": int, "default": None}),
    ("--num-experts", {"type": int, "default": None}),
    ("--moe-router-topk", {"type": int, "default": 2}),
    ("--moe-layer-freq", {"type": str, "default": 1}),
    ("--moe-ffn-hidden-size", {"type": int, "default": None}),
    ("--q-lora-rank", {"type": int, "default": None}),
    ("--kv-lora-rank", {"type": int, "default": 32}),
    ("--qk-head-dim", {"type": int, "default": 128}),
    ("--qk-pos-emb-head-dim", {"type": int, "default": 64}),
    ("--v-head-dim", {"type": int, "default": 128}),
    ("--rope-type", {"type": str, "default": None}),
    ("--use-distributed-optimizer", {"action": "store_true"}),
    ("--tensorboard-dir", {"type": str, "default": None}),
    ("--profile-step-start", {"type": int, "default": 10}),
    ("--profile-step-end", {"type": int, "default": 12}),
    ("--use-pytorch-profiler", {"action": "store_true"}),
    ("--memory-snapshot-path", {"type": str, "default": "snapshot.pickle"}),
]


def parse_args(extra_args_provider=None, ignore_unknown_args: bool = False) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Megatron-LM arguments (test stand-in)", allow_abbrev=False)
    for flag, kwargs in _MEGATRON_FLAGS:
        parser.add_argument(flag, **kwargs)
    if extra_args_provider is not None:
        parser = extra_args_provider(parser)
    if ignore_unknown_args:
        args, _ = parser.parse_known_args()
    else:
        args = parser.parse_args()
    return args


def validate_args(args, defaults=None):
    """Megatron's validation of training settings; slime skips it in rollout-only mode."""
    raise NotImplementedError("megatron.training.arguments.validate_args: training is not available on CPU")


def core_transformer_config_from_args(args, config_class=None):
    raise NotImplementedError("megatron.training.arguments.core_transformer_config_from_args: no Megatron model on CPU")

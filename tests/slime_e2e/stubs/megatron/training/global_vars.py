"""Test-only stand-in for megatron.training.global_vars (Megatron-LM only): slime's Megatron modules import these names at module level; rollout-only runs never call them."""

_ARGS = None


def set_args(args) -> None:
    global _ARGS
    _ARGS = args


def get_args():
    return _ARGS


def _build_tokenizer(args):
    raise NotImplementedError("megatron.training.global_vars._build_tokenizer: no Megatron training on CPU")

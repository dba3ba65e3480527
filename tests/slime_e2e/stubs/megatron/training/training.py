"""Test-only stand-in for megatron.training.training (Megatron-LM only): slime's model module imports get_model at module level; rollout-only runs never build a model."""


def get_model(*args, **kwargs):
    raise NotImplementedError("megatron.training.training.get_model: no Megatron model on CPU")

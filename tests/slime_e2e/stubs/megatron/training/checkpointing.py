"""Test-only stand-in for megatron.training.checkpointing (Megatron-LM only): slime's checkpoint module imports these at module level; rollout-only runs neither load nor save Megatron checkpoints."""


def _unavailable(name):
    def call(*args, **kwargs):
        raise NotImplementedError(f"megatron.training.checkpointing.{name}: no Megatron checkpoints on CPU")

    return call


load_checkpoint = _unavailable("load_checkpoint")
save_checkpoint = _unavailable("save_checkpoint")
get_load_checkpoint_path_by_args = _unavailable("get_load_checkpoint_path_by_args")

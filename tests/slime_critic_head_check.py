"""Build TPPO's critic head through slime's real model code after ``tppo.init`` (run as a subprocess
by tests/test_slime_critic_head.py, so its module stubs stay out of the test process).

Needs slime's source on PYTHONPATH and megatron-core from the package index. ``megatron.training``
ships only with the Megatron-LM repository, so the four modules slime's ``model`` /
``model_provider`` import names from are empty stand-ins here; nothing of them is called.
Prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys
import types
import warnings
from argparse import Namespace


def stub_megatron_training() -> None:
    import megatron

    training = types.ModuleType("megatron.training")
    names = {
        "arguments": ["core_transformer_config_from_args"],
        "global_vars": ["get_args"],
        "training": ["get_model"],
        "checkpointing": ["get_load_checkpoint_path_by_args", "load_checkpoint", "save_checkpoint"],
    }
    for sub, attrs in names.items():
        module = types.ModuleType(f"megatron.training.{sub}")
        for attr in attrs:
            setattr(module, attr, lambda *a, **k: None)
        sys.modules[f"megatron.training.{sub}"] = module
        setattr(training, sub, module)
    sys.modules["megatron.training"] = training
    megatron.training = training


def main() -> None:
    warnings.simplefilter("ignore")
    stub_megatron_training()
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    import slime.backends.megatron_utils.loss as slime_loss
    import slime.backends.megatron_utils.model as slime_model
    import slime.backends.megatron_utils.model_provider as slime_provider
    from tempo_plugin.slime import tppo

    torch.manual_seed(0)
    config = TransformerConfig(num_layers=1, hidden_size=16, num_attention_heads=2, use_cpu_initialization=True)
    before = slime_provider.LinearForLastLayer(input_size=16, output_size=1, config=config)
    before_weight = float(before.weight.abs().sum())
    tppo.init(Namespace())
    after = slime_provider.LinearForLastLayer(input_size=16, output_size=1, config=config)
    tppo.init(Namespace())  # twice: no double wrapping
    again = slime_provider.LinearForLastLayer(input_size=16, output_size=1, config=config)

    # slime's re-draw after loading a checkpoint without a head, on a model holding slime's own head
    holder = torch.nn.Module()
    holder.output_layer = before
    slime_model._reinitialize_critic_output_layer(Namespace(init_method_std=0.02), [holder])
    hidden = torch.randn(5, 16)
    logits, _ = after(hidden)
    print(json.dumps({
        "before_bias": before.bias is not None,
        "before_weight_abs_sum": before_weight,
        "after_bias": after.bias is not None,
        "after_weight_abs_sum": float(after.weight.abs().sum()),
        "after_is_linear_for_last_layer": isinstance(after, slime_provider.LinearForLastLayer.__mro__[1]),
        "again_mro_depth": len(type(again).__mro__) - len(type(after).__mro__),
        "redrawn_weight_abs_sum": float(before.weight.abs().sum()),
        "redrawn_bias_abs_sum": float(before.bias.abs().sum()),
        "logits": logits.squeeze(-1).tolist(),
        "value_loss_patched": slime_loss.value_loss_function is tppo.value_loss,
        "after_requires_grad": bool(after.weight.requires_grad),
    }))


if __name__ == "__main__":
    main()

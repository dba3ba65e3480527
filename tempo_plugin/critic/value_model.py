"""The scalar critic of TPPO/PPO on the embedded runtime.

Built as slime builds its critic: a separate model (its own copy of the policy's backbone) whose
output layer is a linear map from the hidden state to one number. TPPO reads that number as a
logit increment f (``algorithms/tppo.py``); plain PPO reads it as the value itself.

Initialisation of the head (docs/algorithms.md section 2.4):
- no bias: a bias b is added at every position, so the accumulated logit z_t drifts by t * b;
- ``zero`` (default): f = 0 everywhere, so V_t = sigmoid(0) = 1/2 for every prefix: uninformative,
  unbiased in logit space, no drift along t;
- ``small``: N(0, std^2) weights (std 1e-3 by default); the variance of z_t still grows with t,
  so keep it small.

A trained critic is saved as ``critic.safetensors`` + ``critic.json`` (``save_value_model``) and
loaded back onto a copy of the policy's backbone (``load_value_model``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tempo_plugin.estimators import ESTIMATORS as REGISTRY
from tempo_plugin.estimators import VALUE_MODEL

HEAD_INITS = ("zero", "small")


class ValueModel(nn.Module):
    """backbone -> hidden states [B, T, H] -> head -> one scalar per position [B, T]."""

    def __init__(self, backbone: nn.Module, hidden_size: int, init: str = "zero", std: float = 1e-3) -> None:
        super().__init__()
        if init not in HEAD_INITS:
            raise ValueError(f"critic head init must be one of {', '.join(HEAD_INITS)}, got {init!r}")
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1, bias=False)
        with torch.no_grad():
            if init == "zero":
                self.head.weight.zero_()
            else:
                self.head.weight.normal_(0.0, std)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1)


def value_model_from_policy(policy: Any, init: str = "zero", std: float = 1e-3) -> ValueModel:
    """A critic with a deep copy of a Hugging Face causal LM's backbone (the policy is left untouched)."""
    backbone = copy.deepcopy(policy.get_decoder())
    critic = ValueModel(backbone, policy.config.hidden_size, init=init, std=std)
    return critic.to(next(policy.parameters()).device)


def freeze_attention(critic: ValueModel) -> int:
    """Stop training the critic's attention layers (parameters under a ``self_attn`` module, as in
    Llama-, Qwen- and SmolLM-style models); returns how many tensors were frozen."""
    frozen = [p for name, p in critic.named_parameters() if ".self_attn." in f".{name}"]
    for parameter in frozen:
        parameter.requires_grad_(False)
    return len(frozen)


def token_increments(critic: ValueModel, input_ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """[B, T]: column t is the head output at position t - 1, i.e. at the prefix before token t
    (column 0 is 0), aligned with ``trainer.token_logprobs``."""
    outputs = critic(input_ids, attention)[:, :-1].float()
    return torch.cat([torch.zeros_like(outputs[:, :1]), outputs], dim=1)


CRITIC_WEIGHTS = "critic.safetensors"
CRITIC_META = "critic.json"
ESTIMATORS = tuple(name for name, e in REGISTRY.items() if e.critic == VALUE_MODEL)  # the estimators with a value model


def save_value_model(critic: ValueModel, directory: str | Path, estimator: str) -> Path:
    """``<directory>/critic.safetensors`` (the ValueModel's state dict: backbone + head) and
    ``critic.json`` ({"estimator", "hidden_size"}); the backbone's config is the policy's."""
    from safetensors.torch import save_file

    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().contiguous().cpu() for name, tensor in critic.state_dict().items()}
    save_file(state, str(path / CRITIC_WEIGHTS))
    meta = {"estimator": estimator, "hidden_size": int(critic.head.in_features)}
    (path / CRITIC_META).write_text(json.dumps(meta, indent=2) + "\n")
    return path


def critic_estimator(directory: str | Path) -> str:
    """The estimator a saved critic was trained for: ``tppo`` (logit increments) or ``ppo`` (values)."""
    meta = json.loads((Path(directory) / CRITIC_META).read_text())
    estimator = meta.get("estimator")
    if estimator not in ESTIMATORS:
        raise ValueError(f"{directory}/{CRITIC_META}: estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    return estimator


def load_value_model(directory: str | Path, policy: Any) -> ValueModel:
    """The critic saved by ``save_value_model`` in ``directory``, its backbone built from ``policy``
    (a Hugging Face causal LM of the same architecture: the run's saved policy); the policy is left
    untouched. The estimator is in ``critic_estimator(directory)``."""
    from safetensors.torch import load_file

    path = Path(directory)
    meta = json.loads((path / CRITIC_META).read_text())
    if int(meta.get("hidden_size", -1)) != int(policy.config.hidden_size):
        raise ValueError(f"{path}: critic hidden size {meta.get('hidden_size')} differs from the policy's "
                         f"{policy.config.hidden_size}")
    critic = value_model_from_policy(policy)
    state = load_file(str(path / CRITIC_WEIGHTS), device=str(next(policy.parameters()).device))
    critic.load_state_dict(state, strict=True)
    critic.eval()
    return critic

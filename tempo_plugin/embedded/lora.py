"""LoRA adapters (peft) on the embedded runtime's policy.

With ``--lora-rank R`` the policy is wrapped by ``apply_lora``: rank-R adapters on the
``--lora-targets`` linear modules are the only trainable tensors, the base model stays frozen.
A checkpoint then holds the adapters alone (``adapter_model.safetensors`` + ``adapter_config.json``,
whose ``base_model_name_or_path`` names the base: a model directory or a named model).
``model.load_adapted`` loads such a directory: the base, then the adapters, trainable
(``--resume``) or merged into a plain Hugging Face model (inference: eval, analysis, the
``/generate`` server).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from tempo_plugin.config import ConfigError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def target_list(targets: str | Sequence[str]) -> list[str]:
    names = targets.split(",") if isinstance(targets, str) else list(targets)
    return [name.strip() for name in names if name.strip()]


def base_reference(model: Any, given: str = "") -> str:
    """What a checkpoint records as its base: the directory ``model`` was loaded from (absolute; a
    warm-started or bootstrapped model's cache folder, a merged LoRA checkpoint's own directory),
    or ``given`` (``--model``) when that is a named model whose converted folder it was loaded from,
    or when the model was not loaded from a directory."""
    from tempo_plugin.embedded.named_models import NAMED_MODELS

    loaded = str(getattr(model, "name_or_path", "") or "")
    named = NAMED_MODELS.get(given)
    if named is not None and Path(loaded).name == named.folder:
        return given
    for reference in (loaded, given):
        if reference and Path(reference).is_dir():
            return str(Path(reference).resolve())
    return given or loaded


def apply_lora(model: Any, rank: int, alpha: float, targets: str | Sequence[str], base: str = "") -> Any:
    """Wrap ``model`` (in place) in a PeftModel with rank-``rank`` adapters on ``targets``; only the
    adapters require grad. ``alpha`` 0: 2 x rank. ``base``: the ``--model`` it was loaded for (see
    ``base_reference``)."""
    from peft import LoraConfig, get_peft_model

    names = target_list(targets)
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha or 2 * rank,
        lora_dropout=0.0,  # dropout would make the trainer's log-probs differ from the sampler's
        target_modules=names,
        bias="none",
        task_type="CAUSAL_LM",
    )
    reference = base_reference(model, base)
    try:
        wrapped = get_peft_model(model, config)
    except ValueError as error:
        raise ConfigError(f"--lora-targets {','.join(names)}: {' '.join(str(error).split())}") from None
    for name, parameter in wrapped.named_parameters():
        parameter.requires_grad_("lora_" in name)
    wrapped.peft_config["default"].base_model_name_or_path = reference
    wrapped.eval()
    return wrapped


def is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def save_model(model: Any, directory: str | Path) -> None:
    """``save_pretrained``: a PeftModel writes its adapters only. Embeddings are never adapted, so
    peft's check whether to save them (which may look the base up on the Hub) is skipped."""
    if is_peft_model(model):
        model.save_pretrained(directory, save_embedding_layers=False)
    else:
        model.save_pretrained(directory)


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(directory: str | Path) -> str:
    """The base model an adapter directory names (``base_model_name_or_path``)."""
    path = Path(directory) / ADAPTER_CONFIG
    try:
        base = json.loads(path.read_text()).get("base_model_name_or_path") or ""
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read it ({error})") from None
    if not base:
        raise ConfigError(f"{path}: names no base model (base_model_name_or_path)")
    return base

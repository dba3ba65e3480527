"""What a path on the command line of the tools (eval, analysis) points at: a run or a model.

A **run directory** is what ``python -m tempo_plugin.train --out DIR`` writes: ``config.yaml`` and
the policy's weights, in ``checkpoints/latest/`` (TEMPO, multi-turn GRPO; a TEMPO critic with weights
of its own in ``checkpoints/latest/generative_critic/``) or ``policy/``
(single-turn GRPO/PPO/TPPO; their scalar critic in ``critic/``). A **model directory** is any local
Hugging Face model directory (``config.json`` + tokenizer), with no run settings.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tempo_plugin.config import ConfigError, TempoConfig, load_config_file

POLICY_DIRS = ("checkpoints/latest", "policy")
"""Where a run keeps its policy, in the order looked for."""
CRITIC_DIR = "critic"
"""Where a single-turn PPO/TPPO run keeps its scalar critic."""
GENERATIVE_CRITIC_DIR = "generative_critic"
"""Where a TEMPO checkpoint keeps its critic's own weights and optimiser (--critic-weights separate),
inside the policy's folder."""


@dataclass(frozen=True)
class RunRef:
    """A resolved command-line path: the model directory to load and, for a run, its settings."""

    path: Path  # as given
    model_dir: Path  # a Hugging Face model directory (config.json, tokenizer), or LoRA adapters (adapter_config.json)
    config: TempoConfig | None  # the run's config.yaml; None for a bare model directory

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def critic_dir(self) -> Path | None:
        """The run's scalar critic (PPO/TPPO), or None."""
        candidate = self.path / CRITIC_DIR
        return candidate if (candidate / "critic.safetensors").is_file() else None

    @property
    def generative_critic_dir(self) -> Path | None:
        """The run's generative critic when it has weights of its own (--critic-weights separate), or None."""
        candidate = self.model_dir / GENERATIVE_CRITIC_DIR
        return candidate if holds_model(candidate) else None


def resolve_run(path: str | Path) -> RunRef:
    """A run directory, a model directory or a named model (``smollm2-135m``); a one-line ConfigError
    naming the path otherwise."""
    from tempo_plugin.embedded.named_models import NAMED_MODELS, model_directory

    if str(path) in NAMED_MODELS:
        return RunRef(Path(str(path)), Path(model_directory(str(path))), None)
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"{path}: no such directory (give a run directory runs/<name> or a Hugging Face model directory)")
    config = load_config_file(str(root / "config.yaml")) if (root / "config.yaml").is_file() else None
    if holds_model(root):
        return RunRef(root, root, config)
    for sub in POLICY_DIRS:
        if holds_model(root / sub):
            return RunRef(root, root / sub, config)
    if config is not None:
        raise ConfigError(f"{path}: a run directory without a saved policy (no {' or '.join(POLICY_DIRS)}); "
                          "did the run finish its first checkpoint?")
    raise ConfigError(f"{path}: neither a run directory (config.yaml) nor a Hugging Face model directory (config.json)")


def holds_model(directory: Path) -> bool:
    """A Hugging Face model directory (config.json) or LoRA adapters on a base (adapter_config.json;
    ``load_pretrained`` merges them)."""
    return (directory / "config.json").is_file() or (directory / "adapter_config.json").is_file()


class UsageError(Exception):
    """A user error of a tool's command line: printed as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are a UsageError (one line) instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

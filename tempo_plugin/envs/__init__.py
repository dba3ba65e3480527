"""TEMPO environments: the Env protocol and the registry of built-in games.

``make(name, **options)`` builds an environment by the name given with ``--env``.
"""

from __future__ import annotations

from typing import Any

from tempo_plugin.envs.base import Env, StepResult, canonical_action
from tempo_plugin.envs.vault import VaultEnv, VaultSnapshot

ENVS: dict[str, type] = {"vault": VaultEnv}
"""Built-in environments by the name ``--env`` accepts."""


def make(name: str, **options: Any) -> Env:
    """Build the environment registered as ``name`` with constructor ``options``.

    Raises ValueError for an unknown name (the message lists the known ones).
    """
    try:
        cls = ENVS[name]
    except (KeyError, TypeError):
        choices = ", ".join(sorted(ENVS))
        raise ValueError(f"unknown environment {name!r} (--env): choose one of {choices}") from None
    env: Env = cls(**options)
    return env


__all__ = [
    "ENVS",
    "Env",
    "StepResult",
    "VaultEnv",
    "VaultSnapshot",
    "canonical_action",
    "make",
]

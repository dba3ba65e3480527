"""TEMPO environments: the Env protocol and the registry of environments.

``make(name, **options)`` builds an environment by the name given with ``--env``. The vault is
built in (``vaults``, the default chain of vaults, and ``vault``, one vault); TextWorld and ALFWorld need their optional extras and are imported only when chosen.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from tempo_plugin.envs.base import Env, StepResult, canonical_action
from tempo_plugin.envs.vault import VaultEnv, VaultSnapshot

ENVS: dict[str, str] = {
    "vaults": "tempo_plugin.envs.chain:VaultChainEnv",
    "vault": "tempo_plugin.envs.vault:VaultEnv",
    "textworld": "tempo_plugin.envs.textworld:TextWorldEnv",
    "alfworld": "tempo_plugin.envs.alfworld:ALFWorldEnv",
}
"""Environments by the name ``--env`` accepts: ``module:class``, imported on first use."""
BUILT_IN = ("vaults", "vault")
"""The generated games (no game files): the chain of vaults (default) and the one-vault game."""


def env_class(name: str) -> type:
    try:
        module, _, cls = ENVS[name].partition(":")
    except (KeyError, TypeError):
        choices = ", ".join(sorted(ENVS))
        raise ValueError(f"unknown environment {name!r} (--env): choose one of {choices}") from None
    return getattr(importlib.import_module(module), cls)


def make(name: str, **options: Any) -> Env:
    """Build the environment registered as ``name`` with constructor ``options``.

    Raises ValueError for an unknown name (the message lists the known ones), ImportError naming
    the extra to install when the environment's package is missing.
    """
    env: Env = env_class(name)(**options)
    return env


def env_options(name: str, max_steps: int, data_dir: str = "") -> dict[str, Any]:
    """Constructor options from the run settings (``--max-episode-steps``, ``--env-data``)."""
    options: dict[str, Any] = {"max_steps": max_steps}
    if data_dir:
        if name in BUILT_IN:
            raise ValueError(f"--env-data is for environments with game files (textworld, alfworld), not {name}")
        options["data_dir"] = data_dir
    return options


def env_factory(name: str, max_steps: int, data_dir: str = "") -> Callable[[], Env]:
    """A function that builds a fresh environment; builds one now, so a bad name, a missing extra
    or a missing game directory fails here rather than mid-run."""
    options = env_options(name, max_steps, data_dir)
    make(name, **options)
    return lambda: make(name, **options)


__all__ = [
    "ENVS",
    "Env",
    "StepResult",
    "VaultEnv",
    "VaultSnapshot",
    "canonical_action",
    "env_class",
    "env_factory",
    "env_options",
    "make",
]

"""TEMPO environments: the Env protocol and the registry of environments.

``make(name, **options)`` builds an environment by the name given with ``--env``. The vault is
built in (``vaults``, the default chain of vaults, and ``vault``, one vault); TextWorld and ALFWorld need their optional extras and are imported only when chosen.

Training and evaluation play different games. ``env_factory`` builds the training environments,
``eval_env_factory`` the held-out ones: for the built-in games these are the same environments (their
held-out games are the seeds of ``rollout.games.eval_games``, which training never reaches); for the
game-file environments evaluation plays a folder training never reads (ALFWorld: the
``valid_unseen`` or ``valid_seen`` split, ``--eval-split``; TextWorld: ``<games>/eval``; see the
modules' docstrings).
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
DEFAULT_EVAL_SPLIT = "valid_unseen"
"""``--eval-split``'s default (TempoConfig.eval_split)."""
HELD_OUT_SPLITS: dict[str, tuple[str, ...]] = {
    "alfworld": ("valid_unseen", "valid_seen"),
    "textworld": ("eval",),
}
"""The ``split`` values of the held-out games of each game-file environment; the first is the default."""


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


def env_options(name: str, max_steps: int, data_dir: str = "", vaults: int = 3) -> dict[str, Any]:
    """Constructor options from the run settings (``--max-episode-steps``, ``--env-data``, ``--vaults``)."""
    options: dict[str, Any] = {"max_steps": max_steps}
    if name == "vaults":
        options["vaults"] = vaults
    elif vaults != 3:
        raise ValueError(f"--vaults is the chain length of --env vaults, not of {name}")
    if data_dir:
        if name in BUILT_IN:
            raise ValueError(f"--env-data is for environments with game files (textworld, alfworld), not {name}")
        options["data_dir"] = data_dir
    return options


def env_factory(name: str, max_steps: int, data_dir: str = "", vaults: int = 3) -> Callable[[], Env]:
    """A function that builds a fresh environment; builds one now, so a bad name, a missing extra
    or a missing game directory fails here rather than mid-run."""
    options = env_options(name, max_steps, data_dir, vaults)
    make(name, **options)
    return lambda: make(name, **options)


def held_out_split(name: str, eval_split: str = DEFAULT_EVAL_SPLIT) -> str:
    """The ``split`` option of ``name``'s held-out games ("" for the built-in games, which have
    none): ALFWorld's ``eval_split`` (``--eval-split``), TextWorld's ``eval``. ValueError when
    ``eval_split`` is not the default and ``name`` has no such split."""
    splits = HELD_OUT_SPLITS.get(name, ())
    if eval_split in splits:
        return eval_split
    if eval_split == DEFAULT_EVAL_SPLIT:
        return splits[0] if splits else ""
    raise ValueError(f"--eval-split {eval_split} is a split of alfworld; {name} "
                     + (f"evaluates on its {splits[0]} games" if splits else "has no splits"))


def eval_env_factory(name: str, max_steps: int, data_dir: str = "", vaults: int = 3,
                     eval_split: str = DEFAULT_EVAL_SPLIT) -> Callable[[], Env]:
    """A function that builds a fresh environment of the held-out games evaluation plays (the
    trainer's before/after success rate, ``eval/``, the slime evaluation), never a training game:
    the same as :func:`env_factory` for the built-in games, the held-out split (:func:`held_out_split`)
    of ``data_dir`` for the game-file environments. Builds one now, so a missing or empty held-out
    folder fails here, with one line naming the folder and the command that makes it
    (FileNotFoundError)."""
    options = env_options(name, max_steps, data_dir, vaults)
    split = held_out_split(name, eval_split)
    if split:
        options["split"] = split
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
    "eval_env_factory",
    "held_out_split",
    "make",
]

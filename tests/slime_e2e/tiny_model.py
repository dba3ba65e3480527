"""The model the slime end-to-end test serves: the project's built-in tiny model after its format
bootstrap on the chain of vaults (``build_bootstrapped_tiny``), cached by the project under
``$TEMPO_CACHE`` (default ~/.cache/tempo_plugin) as ``tiny-<key>``, so a machine builds it once.

Why a bootstrapped model and not an untrained one: an untrained model never writes a valid action
nor a parsable critic value, so every TEMPO group is degenerate and every rollout all padding; the
test must see real actor and critic samples go through slime. Why 60 steps and not the default
150: about a minute on two cores instead of about three, and enough for mostly valid actions and
critic values that parse about half of the time (a TD group needs a parsed value at its branches'
endpoints; tempo.yaml asks for 4 critic samples per endpoint).
"""

from __future__ import annotations

from pathlib import Path

BOOTSTRAP_STEPS = 60
MAX_EPISODE_STEPS = 15  # T of tests/slime_e2e/tempo.yaml (the tokenizer corpus and demonstrations use it)


def config():
    from tempo_plugin.config import TempoConfig

    return TempoConfig(env="vaults", max_episode_steps=MAX_EPISODE_STEPS, bootstrap_steps=BOOTSTRAP_STEPS, seed=0)


def ensure_model() -> Path:
    """The cached model directory, bootstrapped first if this machine has none."""
    import torch

    from tempo_plugin.embedded.model import build_bootstrapped_tiny, tiny_cache_dir

    cfg = config()
    if not (tiny_cache_dir(cfg) / "config.json").is_file():
        build_bootstrapped_tiny(cfg, torch.device("cpu"))
    return tiny_cache_dir(cfg)

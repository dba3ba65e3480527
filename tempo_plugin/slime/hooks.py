"""Every hook path a slime recipe names (``scripts/methods/*.sh``), by the slime flag it is given to.

One place to look up what a recipe plugs into slime; ``tests/test_slime_hooks.py`` checks that the
recipes name exactly these and that each one imports (without slime: every slime import of the hooks
is inside a function).
"""

from __future__ import annotations

from tempo_plugin.estimators import ESTIMATORS

PACKAGE = "tempo_plugin.slime"

ROLLOUT_FUNCTIONS: dict[str, str] = {
    name: f"{PACKAGE}.rollout.{e.slime_rollout}" for name, e in ESTIMATORS.items() if e.slime_rollout
}
"""--rollout-function-path, per estimator (``estimators``)."""

HOOKS: dict[str, tuple[str, ...]] = {
    "--rollout-function-path": tuple(ROLLOUT_FUNCTIONS.values()),
    "--data-source-path": (f"{PACKAGE}.data_source.TempoDataSource",),
    "--custom-reward-post-process-path": (f"{PACKAGE}.reward.post_process", f"{PACKAGE}.temporal_grpo.post_process"),
    "--custom-advantage-function-path": (f"{PACKAGE}.temporal_grpo.advantages", f"{PACKAGE}.tppo.advantages"),
    "--custom-megatron-init-path": (f"{PACKAGE}.tppo.init",),
    "--custom-rm-path": (f"{PACKAGE}.rewards.math_reward", f"{PACKAGE}.rewards.countdown_reward",
                         f"{PACKAGE}.rewards.letters_reward"),
}
"""slime flag -> the hook paths of ours it may be given."""

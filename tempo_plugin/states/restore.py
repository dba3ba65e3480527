"""Bring an environment to a saved MacroState: snapshot where available, else replay + verify."""

from __future__ import annotations

from tempo_plugin.envs.base import Env
from tempo_plugin.states.state import MacroState


class RestoreError(RuntimeError):
    """The restored environment does not show the saved observation: the state must be dropped."""


def restore_env(env: Env, state: MacroState, method: str = "auto") -> None:
    """Restore ``env`` to ``state`` and check the observation character by character.

    method "auto" uses the state's snapshot when the environment supports snapshots, otherwise
    replays ``action_history`` from ``reset(env_seed)``; "replay" always replays.
    """
    if method == "auto" and env.supports_snapshot and state.snapshot is not None:
        try:
            env.restore(state.snapshot)
        except (TypeError, ValueError) as error:
            raise RestoreError(f"snapshot of game {state.env_seed} does not fit this environment: {error}") from error
    else:
        env.reset(state.env_seed)
        for i, action in enumerate(state.action_history):
            result = env.step(action)
            if result.done and i + 1 < len(state.action_history):
                raise RestoreError(
                    f"replay of game {state.env_seed} ended at action {i + 1} of {len(state.action_history)}"
                )
    if env.observation != state.observation:
        raise RestoreError(
            f"restored game {state.env_seed} after {len(state.action_history)} actions shows a different "
            "observation than the saved state"
        )

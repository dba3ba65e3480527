"""Saved mid-episode states: MacroState, the FIFO StateStore, and restore (snapshot or replay)."""

from tempo_plugin.states.restore import RestoreError, restore_env
from tempo_plugin.states.state import MacroState
from tempo_plugin.states.store import StateStore

__all__ = ["MacroState", "RestoreError", "StateStore", "restore_env"]

"""Runtimes: ``local`` (embedded, HF transformers) and ``slime`` (hooks for the slime framework)."""

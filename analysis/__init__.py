"""Analyses of trained runs (``python -m analysis.<name>``), beside the ``tempo_plugin`` package."""

"""Test-only stand-in for sglang.srt.utils (GPU-only package): the two names slime's engine and weight-update modules import; neither is called in rollout-only runs."""

from __future__ import annotations

import base64
import os
import pickle
import signal


def kill_process_tree(pid: int, include_parent: bool = True) -> None:
    """Kill ``pid`` and its descendants (slime calls it when it shuts down engines it launched)."""
    import psutil

    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    victims = parent.children(recursive=True) + ([parent] if include_parent else [])
    for process in victims:
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class MultiprocessingSerializer:
    """Pickle-and-base64 round trip, the interface slime's tensor weight update uses."""

    @staticmethod
    def serialize(obj, output_str: bool = False):
        data = pickle.dumps(obj)
        return base64.b64encode(data).decode() if output_str else data

    @staticmethod
    def deserialize(data):
        if isinstance(data, str):
            data = base64.b64decode(data)
        return pickle.loads(data)

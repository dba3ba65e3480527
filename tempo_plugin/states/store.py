"""Bounded FIFO store of MacroStates with uniform sampling without replacement and a reuse cap."""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from tempo_plugin.states.state import MacroState


class StateStore:
    """``add`` appends and evicts the oldest beyond ``capacity``; ``sample(k, max_uses)`` returns
    min(k, size) distinct states uniformly at random. A sampled state stays in the store until it
    has been sampled ``max_uses`` times (0: forever, as in the reference implementation)."""

    def __init__(self, capacity: int, seed: int) -> None:
        if capacity < 1:
            raise ValueError(f"state store capacity must be >= 1 (--state-store-capacity), got {capacity}")
        self.capacity = capacity
        self._states: deque[MacroState] = deque(maxlen=capacity)
        self._uses: deque[int] = deque(maxlen=capacity)  # times each state was sampled
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self):
        return iter(self._states)

    def add(self, states: Iterable[MacroState]) -> int:
        added = 0
        for state in states:
            self._states.append(state)
            self._uses.append(0)
            added += 1
        return added

    def sample(self, k: int, max_uses: int = 0) -> list[MacroState]:
        k = min(max(k, 0), len(self._states))
        indices = self._rng.sample(range(len(self._states)), k)
        picked = [self._states[i] for i in indices]
        for i in indices:
            self._uses[i] += 1
        if max_uses > 0:
            keep = [(s, u) for s, u in zip(self._states, self._uses) if u < max_uses]
            self._states = deque((s for s, _ in keep), maxlen=self.capacity)
            self._uses = deque((u for _, u in keep), maxlen=self.capacity)
        return picked

    def state_dict(self) -> dict:
        """Plain data (JSON-ready): the states without their environment snapshots, the use counts
        and the sampling RNG. A state loaded back restores by replay (verified by observation)."""
        version, internal, gauss = self._rng.getstate()
        return {"capacity": self.capacity, "states": [state_to_dict(s) for s in self._states],
                "uses": list(self._uses), "rng": [version, list(internal), gauss]}

    @classmethod
    def from_state_dict(cls, payload: dict, capacity: int | None = None) -> "StateStore":
        """The saved store; with a different ``capacity`` it keeps the newest states that fit."""
        store = cls(capacity or payload["capacity"], seed=0)
        uses = payload.get("uses", [0] * len(payload["states"]))  # stores saved before the reuse cap
        store._states.extend(s if isinstance(s, MacroState) else state_from_dict(s) for s in payload["states"])
        store._uses.extend(uses)
        version, internal, gauss = payload["rng"]
        store._rng.setstate((version, tuple(internal), gauss))
        return store

    def save(self, path: str | Path) -> None:
        """JSON (no code runs when it is loaded), written to a temporary file and then renamed."""
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(json.dumps(self.state_dict()))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "StateStore":
        return cls.from_state_dict(json.loads(Path(path).read_text()))


def state_to_dict(state: MacroState) -> dict[str, Any]:
    """A MacroState as JSON-ready data; the environment snapshot (an env-internal object) is left out."""
    data = {f.name: getattr(state, f.name) for f in fields(state) if f.name != "snapshot"}
    data["messages"] = [list(m) for m in state.messages]
    data["assistant_spans"] = [list(span) for span in state.assistant_spans]
    return data


def state_from_dict(data: dict[str, Any]) -> MacroState:
    return MacroState(**{**data, "action_history": tuple(data["action_history"]), "token_prefix": tuple(data["token_prefix"]),
                         "messages": tuple(tuple(m) for m in data["messages"]),
                         "assistant_spans": tuple(tuple(span) for span in data.get("assistant_spans", ()))})

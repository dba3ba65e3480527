"""Bounded FIFO store of MacroStates with uniform sampling without replacement."""

from __future__ import annotations

import pickle
import random
from collections import deque
from pathlib import Path
from typing import Iterable

from tempo_plugin.states.state import MacroState


class StateStore:
    """``add`` appends and evicts the oldest beyond ``capacity``; ``sample(k)`` returns
    min(k, size) distinct states uniformly at random and leaves them in the store."""

    def __init__(self, capacity: int, seed: int) -> None:
        if capacity < 1:
            raise ValueError(f"state store capacity must be >= 1 (--state-store-capacity), got {capacity}")
        self.capacity = capacity
        self._states: deque[MacroState] = deque(maxlen=capacity)
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self):
        return iter(self._states)

    def add(self, states: Iterable[MacroState]) -> int:
        added = 0
        for state in states:
            self._states.append(state)
            added += 1
        return added

    def sample(self, k: int) -> list[MacroState]:
        k = min(k, len(self._states))
        indices = self._rng.sample(range(len(self._states)), k)
        return [self._states[i] for i in indices]

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "states": list(self._states), "rng": self._rng.getstate()}

    @classmethod
    def from_state_dict(cls, payload: dict, capacity: int | None = None) -> "StateStore":
        """The saved store; with a different ``capacity`` it keeps the newest states that fit."""
        store = cls(capacity or payload["capacity"], seed=0)
        store._states.extend(payload["states"])
        store._rng.setstate(payload["rng"])
        return store

    def save(self, path: str | Path) -> None:
        """Pickle the states and the sampling RNG (checkpoints are trusted files of this run)."""
        tmp = Path(str(path) + ".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(self.state_dict(), f)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "StateStore":
        with open(path, "rb") as f:
            return cls.from_state_dict(pickle.load(f))

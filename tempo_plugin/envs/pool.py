"""EnvPool: environments built once and reused by every branch, update and evaluation of a run.

Building an environment can cost far more than a step (ALFWorld discovers its game files and
builds a PDDL engine; TextWorld loads its interpreter), and a TD update needs S x N of them. A
branch takes an environment from the pool with ``acquire`` and gives it back with ``release``
when its rollout is over; every user brings the environment to a state itself (``reset`` or
``restore_env``), so a reused environment carries nothing over. ``acquire(key)`` prefers an idle
environment last released with the same key (the game seed), which spares ALFWorld and TextWorld
loading that game again. An environment that raised is not released: it is dropped, and the pool
builds a new one when it runs short.
"""

from __future__ import annotations

from typing import Callable, Hashable

from tempo_plugin.envs.base import Env


class EnvPool:
    def __init__(self, make: Callable[[], Env]) -> None:
        self.make = make
        self.built = 0  # environments built so far
        self.reused = 0  # acquisitions served by an idle environment
        self._idle: list[tuple[Hashable, Env]] = []

    @property
    def idle(self) -> int:
        return len(self._idle)

    def acquire(self, key: Hashable = None) -> Env:
        """An idle environment (the most recently released one with ``key`` if any), else a new one."""
        for i in range(len(self._idle) - 1, -1, -1):
            if self._idle[i][0] == key:
                self.reused += 1
                return self._idle.pop(i)[1]
        if self._idle:
            self.reused += 1
            return self._idle.pop()[1]
        self.built += 1
        return self.make()

    def release(self, env: Env, key: Hashable = None) -> None:
        """Give ``env`` back for reuse; ``key`` is what it was last used for (the game seed)."""
        if any(idle is env for _, idle in self._idle):
            raise ValueError("environment released twice: a branch kept using it after release?")
        self._idle.append((key, env))

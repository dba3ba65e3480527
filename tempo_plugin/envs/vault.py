"""VaultEnv: the built-in long-horizon credit-assignment test bed.

The game has one decisive early choice whose consequence shows up only many rounds later.
The agent starts in a key room holding no key and must take exactly one of 2 to 4 coloured
keys; the key room then locks behind it. It walks north through ``L`` halls (``L`` is 8 to 14
by default) to the vault door in hall ``L`` and opens the vault. Only the key whose colour the
sign in the key room names opens it; any other key seals the vault forever. So the reward of the
final ``open vault`` is decided by the very first action, about ``L`` rounds earlier.

Every game is generated from an integer seed with a local ``random.Random`` and is fully
deterministic: the same seed and the same action sequence always give the same observations.
The environment never ends an episode on a step budget; the caller enforces the horizon.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import Optional

from tempo_plugin.envs.base import EpisodeProgress, StepResult, canonical_action, with_action_list

PALETTE: tuple[str, ...] = ("red", "blue", "green", "gold", "black", "white", "silver", "amber")
"""Key colours a game draws its keys from."""

MIN_KEYS = 2
MAX_KEYS = 4
KEY_ROOM = 0
"""Position of the key room; halls are positions ``1..length``."""

NORTH = "north"
SOUTH = "south"
WAIT = "wait"
OPEN_VAULT = "open vault"
TAKE_PREFIX = "take "

_NOTHING_PREFIX = "Nothing happens. "
_WAIT_PREFIX = "Time passes. "
_OVER = "The episode is over."


@dataclass(frozen=True)
class VaultGame:
    """The parameters of one procedurally generated game.

    Attributes:
        seed: the seed the game was generated from.
        length: number of halls ``L``; the vault door is in hall ``L``.
        keys: the key colours on offer, in the order they are listed.
        correct: the colour of the key that opens the vault (one of ``keys``).
    """

    seed: int
    length: int
    keys: tuple[str, ...]
    correct: str

    @classmethod
    def generate(cls, seed: int, min_length: int, max_length: int) -> VaultGame:
        """Generate the game for ``seed`` with ``min_length <= length <= max_length``."""
        rng = random.Random(seed)
        length = rng.randint(min_length, max_length)
        count = rng.randint(MIN_KEYS, MAX_KEYS)
        keys = tuple(rng.sample(PALETTE, count))  # distinct colours, in a seed-shuffled order
        correct = rng.choice(keys)
        return cls(seed=seed, length=length, keys=keys, correct=correct)


@dataclass(frozen=True)
class VaultSnapshot:
    """An immutable copy of a :class:`VaultEnv` state, taken by ``snapshot()`` in O(1).

    ``min_length``/``max_length`` record the configuration the game was generated under, so that
    ``restore`` can regenerate exactly the same game from ``seed``.
    ``position`` is 0 in the key room and ``i`` in hall ``i``; ``held`` is None before a key
    is taken.
    """

    seed: int
    min_length: int
    max_length: int
    position: int
    held: Optional[str]
    done: bool
    won: bool
    steps: int
    observation: str


def _check_int(name: str, value: object) -> int:
    """Return ``value`` if it is a plain int (not a bool), else raise a TypeError naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return value


class VaultEnv(EpisodeProgress):
    """The vault game; implements :class:`tempo_plugin.envs.base.Env` with snapshot support.

    Args:
        max_steps: the horizon the caller is expected to enforce; the env itself never ends an
            episode on it. Must be at least ``max_length + 1`` so an optimal agent can win.
        min_length: the fewest halls a game can have (at least 2).
        max_length: the most halls a game can have (at least ``min_length``).
    """

    supports_snapshot: bool = True

    def __init__(self, max_steps: int = 40, min_length: int = 8, max_length: int = 14) -> None:
        _check_int("max_steps", max_steps)
        _check_int("min_length", min_length)
        _check_int("max_length", max_length)
        if min_length < 2:
            raise ValueError(f"min_length must be at least 2, got {min_length}")
        if max_length < min_length:
            raise ValueError(
                f"max_length must be at least min_length ({min_length}), got {max_length}"
            )
        if max_steps < max_length + 1:
            raise ValueError(
                f"max_steps must be at least max_length + 1 ({max_length + 1}), got {max_steps}"
            )
        self.max_steps: int = max_steps
        self.min_length: int = min_length
        self.max_length: int = max_length
        self._game: Optional[VaultGame] = None
        self._position: int = KEY_ROOM
        self._held: Optional[str] = None
        self._done: bool = False
        self._won: bool = False
        self._steps: int = 0
        self._observation: str = ""

    def __repr__(self) -> str:
        seed = None if self._game is None else self._game.seed
        return (
            f"VaultEnv(max_steps={self.max_steps}, min_length={self.min_length}, "
            f"max_length={self.max_length}, seed={seed})"
        )

    # ------------------------------------------------------------------ game state accessors

    def _require_game(self) -> VaultGame:
        if self._game is None:
            raise RuntimeError("VaultEnv has no game yet; call reset(seed) first")
        return self._game

    @property
    def game(self) -> VaultGame:
        """The parameters of the current game."""
        return self._require_game()

    @property
    def seed(self) -> int:
        """The seed of the current game."""
        return self._require_game().seed

    @property
    def task(self) -> str:
        """The task description shown to the actor."""
        game = self._require_game()
        return f"Take a key, walk north through {game.length} halls and open the vault."

    @property
    def minimal_steps(self) -> int:
        """Rounds an optimal agent needs from reset: take, ``L - 1`` times north, open."""
        return self._require_game().length + 1

    @property
    def position(self) -> int:
        """0 in the key room, ``i`` in hall ``i``."""
        self._require_game()
        return self._position

    @property
    def held(self) -> Optional[str]:
        """The colour of the key held, or None in the key room."""
        self._require_game()
        return self._held

    # ------------------------------------------------------------------ texts

    def _room_text(self) -> str:
        """The description of the current room, ending with its admissible actions."""
        game = self._require_game()
        actions = self._room_actions()
        if self._position == KEY_ROOM:
            keys = ", ".join(game.keys)
            return with_action_list(f"Key room. A sign says the vault is {game.correct}. Keys: {keys}.", actions)
        where = f"Hall {self._position} of {game.length}"
        if self._position == game.length:
            where += ", the vault door"
        return with_action_list(f"{where}. You hold the {self._held} key.", actions)

    def _room_actions(self) -> list[str]:
        """The admissible actions of the current room, ignoring whether the episode is over."""
        game = self._require_game()
        if self._position == KEY_ROOM:
            return [TAKE_PREFIX + key for key in game.keys]
        if self._position == game.length:
            return [OPEN_VAULT, SOUTH, WAIT]
        if self._position == 1:
            return [NORTH, WAIT]
        return [NORTH, SOUTH, WAIT]

    # ------------------------------------------------------------------ Env protocol

    def reset(self, seed: int) -> str:
        """Start the game generated from ``seed`` in the key room and return its observation."""
        seed = operator.index(seed)
        if self._game is None or self._game.seed != seed:
            self._game = VaultGame.generate(seed, self.min_length, self.max_length)
        self._position = KEY_ROOM
        self._held = None
        self._done = False
        self._won = False
        self._steps = 0
        self._observation = self._room_text()
        return self._observation

    def admissible_actions(self) -> list[str]:
        """The actions that do something now, in the order the observation lists them."""
        self._require_game()
        if self._done:
            return []
        return self._room_actions()

    def step(self, action: str) -> StepResult:
        """Apply ``action`` (any string; inadmissible ones do nothing) and return the result."""
        game = self._require_game()
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self._steps += 1
        command = canonical_action(action) if isinstance(action, str) else ""
        if command not in self._room_actions():
            self._observation = _NOTHING_PREFIX + self._room_text()
            return StepResult(self._observation, 0.0, False, False, {"admissible": False})

        reward = 0.0
        if self._position == KEY_ROOM:  # command is "take <colour>"
            self._held = command[len(TAKE_PREFIX):]
            self._position = 1
            self._observation = self._room_text()
        elif command == NORTH:
            self._position += 1
            self._observation = self._room_text()
        elif command == SOUTH:
            self._position -= 1
            self._observation = self._room_text()
        elif command == WAIT:
            self._observation = _WAIT_PREFIX + self._room_text()
        else:  # OPEN_VAULT at hall L
            self._done = True
            if self._held == game.correct:
                self._won = True
                reward = 1.0
                self._observation = f"The {self._held} key turns and the vault opens. You win."
            else:
                self._observation = (
                    f"The {self._held} key does not fit. The vault seals forever. You lose."
                )
        return StepResult(self._observation, reward, self._done, self._won, {"admissible": True})

    stage_count: int = 2
    """Milestones of the game (Temporal GRPO's stages): "holds the right key", then "the vault is open" (the win)."""

    def stages_completed(self) -> int:
        """How many of the two milestones hold now, from the privileged state (stable: the key stays held)."""
        game = self._require_game()
        return 2 if self._won else int(self._held == game.correct)

    def privileged_info(self) -> str:
        """The winning plan from the current state; for the critic only, never the actor."""
        game = self._require_game()
        if self._done:
            return _OVER
        head = f"The vault opens only with the {game.correct} key."
        if self._position == KEY_ROOM:
            return (
                f"{head} Plan: take {game.correct}, north x{game.length - 1}, "
                f"open vault ({game.length + 1} steps)."
            )
        if self._held != game.correct:
            return f"{head} Plan: none, the {self._held} key cannot open the vault."
        remaining = game.length - self._position
        if remaining == 0:
            return f"{head} Plan: open vault (1 step)."
        return f"{head} Plan: north x{remaining}, open vault ({remaining + 1} steps)."

    def winnable(self) -> bool:
        """Whether some plan still wins from here (the decisive hidden fact)."""
        return not self.done and (self._held is None or self._held == self._require_game().correct)

    def expert_action(self) -> Optional[str]:
        """The first action of the optimal plan, or None when the game is over or lost."""
        game = self._require_game()
        if self._done:
            return None
        if self._position == KEY_ROOM:
            return TAKE_PREFIX + game.correct
        if self._held != game.correct:
            return None
        if self._position == game.length:
            return OPEN_VAULT
        return NORTH

    def snapshot(self) -> VaultSnapshot:
        """An immutable copy of the current state (O(1))."""
        game = self._require_game()
        return VaultSnapshot(
            seed=game.seed,
            min_length=self.min_length,
            max_length=self.max_length,
            position=self._position,
            held=self._held,
            done=self._done,
            won=self._won,
            steps=self._steps,
            observation=self._observation,
        )

    def restore(self, snapshot: VaultSnapshot) -> None:
        """Set this env to exactly the state in ``snapshot``.

        The game is regenerated from ``snapshot.seed`` when this env holds another game or none.
        Raises TypeError for a non-snapshot, and ValueError when the snapshot was taken from an
        env with other length bounds (its game could differ) or describes an impossible state.
        """
        if not isinstance(snapshot, VaultSnapshot):
            raise TypeError(f"restore() needs a VaultSnapshot, got {type(snapshot).__name__}")
        if (snapshot.min_length, snapshot.max_length) != (self.min_length, self.max_length):
            raise ValueError(
                f"snapshot was taken with min_length={snapshot.min_length}, "
                f"max_length={snapshot.max_length}; this env has min_length={self.min_length}, "
                f"max_length={self.max_length}"
            )
        game = self._game
        if game is None or game.seed != snapshot.seed:
            game = VaultGame.generate(snapshot.seed, self.min_length, self.max_length)
        if not 0 <= snapshot.position <= game.length:
            raise ValueError(f"snapshot position {snapshot.position} is outside 0..{game.length}")
        if (snapshot.position == KEY_ROOM) != (snapshot.held is None) or (
            snapshot.held is not None and snapshot.held not in game.keys
        ):
            raise ValueError(
                f"snapshot holds key {snapshot.held!r} at position {snapshot.position}, "
                f"impossible in game {snapshot.seed}"
            )
        self._game = game
        self._position = snapshot.position
        self._held = snapshot.held
        self._done = snapshot.done
        self._won = snapshot.won
        self._steps = snapshot.steps
        self._observation = snapshot.observation

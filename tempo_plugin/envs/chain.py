"""VaultChainEnv (``--env vaults``): several decisions, each paid off only rounds later.

The agent passes a chain of V vaults (3 by default). Before vault i it stands in key room i: a sign
shows a symbol, 2 to 4 coloured keys lie there and it must take exactly one; the room locks behind
it. A fixed rule of the world, the same in every game and never told to the actor (SIGNS: sun
gold, moon silver, ...), maps the symbol to the key that opens the vault: the agent has to learn
it from the delayed outcomes. (The ~3M built-in model never learned, within its bootstrap budget,
to copy a colour named in its context, nor to find the symbol in the context when the rule was
stated in the task text too; a symbol that appears only on the sign it learns to read.) It walks north through L_i halls (2 to 4 by default) to the door of vault i and
opens it. The right key opens the vault and leads into key room i+1 (the key stays in the lock);
any other key seals the vault and the episode is lost. Opening the last vault wins (reward 1, the
only reward). So a game holds V key decisions spread over the episode, the consequence of each
arrives L_i rounds after it, and mid-episode key rooms are decision points: an episode-level
return mixes the credit of all V choices, while a macro-step from a key room sees its own.

Games are generated from an integer seed with a local ``random.Random``: the same seed and the
same actions give the same observations. The environment never ends an episode on a step budget.
The critic's privileged information is exact: the key that opens the current vault and the length
of the optimal remaining plan, or that no plan can win.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import Optional

from tempo_plugin.envs.base import EpisodeProgress, StepResult, canonical_action, with_action_list
from tempo_plugin.envs.vault import MIN_KEYS, NORTH, OPEN_VAULT, SOUTH, TAKE_PREFIX, WAIT

ROUNDS_PER_VAULT = 10
"""An episode cap that fits a chain of V vaults, T = 10 V: a vault takes 3 to 5 steps (a key, 2 to 4
halls, the door), so a policy gets about two tries at each. bench/horizon.py and eval/eval.sh
--vaults use it."""

SIGNS: dict[str, str] = {"sun": "gold", "moon": "silver", "star": "white", "tree": "green"}
"""The symbol a sign shows -> the colour of the key that opens its vault (the same in every game)."""
KEY_COLOURS: tuple[str, ...] = tuple(SIGNS.values())
SYMBOL_OF: dict[str, str] = {colour: symbol for symbol, colour in SIGNS.items()}

_NOTHING_PREFIX = "Nothing happens. "
_WAIT_PREFIX = "Time passes. "
_OVER = "The episode is over."


@dataclass(frozen=True)
class Vault:
    """One link of the chain: ``length`` halls up to its door, the keys on offer, the right one."""

    length: int
    keys: tuple[str, ...]
    correct: str


@dataclass(frozen=True)
class ChainGame:
    seed: int
    vaults: tuple[Vault, ...]

    @classmethod
    def generate(cls, seed: int, count: int, min_length: int, max_length: int) -> "ChainGame":
        rng = random.Random(seed)
        vaults = []
        for _ in range(count):
            length = rng.randint(min_length, max_length)
            keys = tuple(rng.sample(KEY_COLOURS, rng.randint(MIN_KEYS, len(KEY_COLOURS))))
            vaults.append(Vault(length, keys, rng.choice(keys)))
        return cls(seed, tuple(vaults))

    @property
    def minimal_steps(self) -> int:
        """Rounds an optimal agent needs: per vault, take + (L - 1) x north + open."""
        return sum(v.length + 1 for v in self.vaults)


@dataclass(frozen=True)
class ChainSnapshot:
    """An immutable copy of a :class:`VaultChainEnv` state (O(1)); ``stage`` is the current vault
    (0-based), ``position`` 0 in its key room and ``i`` in hall ``i``."""

    seed: int
    options: tuple[int, int, int]  # (vaults, min_length, max_length) the game was generated under
    stage: int
    position: int
    held: Optional[str]
    done: bool
    won: bool
    steps: int
    observation: str


class VaultChainEnv(EpisodeProgress):
    """A chain of vaults; implements :class:`tempo_plugin.envs.base.Env` with snapshot support."""

    supports_snapshot: bool = True

    def __init__(self, max_steps: int = 30, vaults: int = 3, min_length: int = 2, max_length: int = 4) -> None:
        for name, value in (("max_steps", max_steps), ("vaults", vaults), ("min_length", min_length), ("max_length", max_length)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        if vaults < 1:
            raise ValueError(f"vaults must be at least 1, got {vaults}")
        if min_length < 2:
            raise ValueError(f"min_length must be at least 2, got {min_length}")
        if max_length < min_length:
            raise ValueError(f"max_length must be at least min_length ({min_length}), got {max_length}")
        if max_steps < vaults * (max_length + 1):
            raise ValueError(
                f"max_steps must be at least vaults x (max_length + 1) = {vaults * (max_length + 1)} "
                f"so an optimal agent can win (--max-episode-steps), got {max_steps}"
            )
        self.max_steps = max_steps
        self.options = (vaults, min_length, max_length)
        self._game: Optional[ChainGame] = None
        self._stage = 0
        self._position = 0
        self._held: Optional[str] = None
        self._done = False
        self._won = False
        self._steps = 0
        self._observation = ""

    # ------------------------------------------------------------------ state

    @property
    def game(self) -> ChainGame:
        if self._game is None:
            raise RuntimeError("VaultChainEnv has no game yet; call reset(seed) first")
        return self._game

    def _require_game(self) -> ChainGame:
        return self.game

    @property
    def vault(self) -> Vault:
        return self.game.vaults[self._stage]

    @property
    def stage(self) -> int:
        self.game
        return self._stage

    @property
    def vaults_left(self) -> int:
        """Vaults still to open, the current one included."""
        return len(self.game.vaults) - self._stage

    @property
    def position(self) -> int:
        self.game
        return self._position

    @property
    def held(self) -> Optional[str]:
        self.game
        return self._held

    @property
    def task(self) -> str:
        return (f"Pass {len(self.game.vaults)} vaults. In each key room take the key its sign calls for, "
                "walk north and open the vault.")

    # ------------------------------------------------------------------ texts

    def _room_actions(self) -> list[str]:
        vault = self.vault
        if self._position == 0:
            return [TAKE_PREFIX + key for key in vault.keys]
        if self._position == vault.length:
            return [OPEN_VAULT, SOUTH, WAIT]
        if self._position == 1:
            return [NORTH, WAIT]
        return [NORTH, SOUTH, WAIT]

    def _room_text(self) -> str:
        vault, number, count = self.vault, self._stage + 1, len(self.game.vaults)
        if self._position == 0:
            text = f"Key room {number} of {count}. The sign shows a {SYMBOL_OF[vault.correct]}. Keys: {', '.join(vault.keys)}."
        else:
            where = f"Hall {self._position} of {vault.length} to vault {number}"
            if self._position == vault.length:
                where += ", at its door"
            text = f"{where}. You hold the {self._held} key."
        return with_action_list(text, self._room_actions())

    # ------------------------------------------------------------------ Env protocol

    def reset(self, seed: int) -> str:
        seed = operator.index(seed)
        if self._game is None or self._game.seed != seed:
            self._game = ChainGame.generate(seed, *self.options)
        self._stage = self._position = self._steps = 0
        self._held = None
        self._done = self._won = False
        self._observation = self._room_text()
        return self._observation

    def admissible_actions(self) -> list[str]:
        self.game
        return [] if self._done else self._room_actions()

    def step(self, action: str) -> StepResult:
        vault = self.vault
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self._steps += 1
        command = canonical_action(action) if isinstance(action, str) else ""
        if command not in self._room_actions():
            self._observation = _NOTHING_PREFIX + self._room_text()
            return StepResult(self._observation, 0.0, False, False, {"admissible": False})
        reward = 0.0
        number = self._stage + 1
        if self._position == 0:
            self._held = command[len(TAKE_PREFIX):]
            self._position = 1
            self._observation = self._room_text()
        elif command in (NORTH, SOUTH):
            self._position += 1 if command == NORTH else -1
            self._observation = self._room_text()
        elif command == WAIT:
            self._observation = _WAIT_PREFIX + self._room_text()
        elif self._held != vault.correct:  # open vault with the wrong key
            self._done = True
            self._observation = f"The {self._held} key does not fit. Vault {number} seals forever. You lose."
        elif number == len(self.game.vaults):  # the last vault opens
            self._done = self._won = True
            reward = 1.0
            self._observation = f"The {self._held} key turns and vault {number} opens. You win."
        else:
            opened = f"The {self._held} key turns and vault {number} opens. "
            self._stage += 1
            self._position = 0
            self._held = None
            self._observation = opened + self._room_text()
        return StepResult(self._observation, reward, self._done, self._won, {"admissible": True})

    def privileged_info(self) -> str:
        """The key of the current vault and the optimal remaining plan; for the critic only."""
        if self.done:
            return _OVER
        vault, number = self.vault, self._stage + 1
        head = f"Vault {number} opens only with the {vault.correct} key."
        if self._held is not None and self._held != vault.correct:
            return f"{head} Plan: none, the {self._held} key cannot open it."
        later = sum(v.length + 1 for v in self.game.vaults[self._stage + 1:])
        if self._position == 0:
            here, steps = f"take {vault.correct}, north x{vault.length - 1}, open vault", vault.length + 1
        elif self._position < vault.length:
            here, steps = f"north x{vault.length - self._position}, open vault", vault.length - self._position + 1
        else:
            here, steps = "open vault", 1
        rest = len(self.game.vaults) - number
        then = f", then {rest} more vault{'s' if rest > 1 else ''}" if rest else ""
        total = steps + later
        return f"{head} Plan: {here}{then} ({total} step{'s' if total > 1 else ''})."

    @property
    def stage_count(self) -> int:
        """Milestones of the game (Temporal GRPO's stages): per vault i, "holds the key that opens
        vault i", then "vault i is open"; the last one is the win."""
        return 2 * len(self.game.vaults)

    def stages_completed(self) -> int:
        """How many of the milestones in order hold now (stable: a taken key stays held until its
        vault opens, and an open vault stays open); from the privileged state, never shown to the actor."""
        if self._won:
            return self.stage_count
        return 2 * self._stage + int(self._held == self.vault.correct)

    def winnable(self) -> bool:
        """Whether some plan still wins from here (the decisive hidden fact)."""
        return not self.done and (self._held is None or self._held == self.vault.correct)

    def expert_action(self) -> Optional[str]:
        """The first action of the optimal plan; None when the game is over or lost."""
        if not self.winnable():
            return None
        vault = self.vault
        if self._position == 0:
            return TAKE_PREFIX + vault.correct
        return OPEN_VAULT if self._position == vault.length else NORTH

    def snapshot(self) -> ChainSnapshot:
        return ChainSnapshot(self.game.seed, self.options, self._stage, self._position, self._held,
                             self._done, self._won, self._steps, self._observation)

    def restore(self, snapshot: ChainSnapshot) -> None:
        """Set this env to ``snapshot``; TypeError for a non-snapshot, ValueError for a snapshot of
        other game options or an impossible state."""
        if not isinstance(snapshot, ChainSnapshot):
            raise TypeError(f"restore() needs a ChainSnapshot, got {type(snapshot).__name__}")
        if snapshot.options != self.options:
            raise ValueError(f"snapshot was taken with (vaults, min_length, max_length) = {snapshot.options}; this env has {self.options}")
        game = self._game if self._game is not None and self._game.seed == snapshot.seed else ChainGame.generate(snapshot.seed, *self.options)
        if not 0 <= snapshot.stage < len(game.vaults):
            raise ValueError(f"snapshot stage {snapshot.stage} is outside 0..{len(game.vaults) - 1}")
        vault = game.vaults[snapshot.stage]
        if not 0 <= snapshot.position <= vault.length or (snapshot.position == 0) != (snapshot.held is None) or (
            snapshot.held is not None and snapshot.held not in vault.keys
        ):
            raise ValueError(f"snapshot holds key {snapshot.held!r} at position {snapshot.position} of vault "
                             f"{snapshot.stage + 1}, impossible in game {snapshot.seed}")
        self._game = game
        self._stage, self._position, self._held = snapshot.stage, snapshot.position, snapshot.held
        self._done, self._won, self._steps, self._observation = snapshot.done, snapshot.won, snapshot.steps, snapshot.observation

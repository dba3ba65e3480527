"""TextWorldEnv: procedurally generated TextWorld games (Microsoft TextWorld 1.7) as TEMPO environments.

Games are generated offline with TextWorld's generator: each game is a ``.z8`` story file played
by the jericho Z-machine interpreter plus a ``.json`` file with the game's logic (used for the
admissible commands and the winning plan).

Layout (``make_layout``, ``split_dir``): ``python -m tempo_plugin.envs.textworld --make-games DIR
--count N --seed S [--eval-count M]`` writes ``DIR/train/game_00000.z8 ...`` (N training games) and
``DIR/eval/game_00000.z8 ...`` (M held-out games, default 64, the trainer's default
``--eval-games``). The held-out games come from a seed stream of their own: their generator seeds
lie in [2^31, 2^32), the training games' in [1, 2^31), so no held-out game is generated from a
training game's seed. Training (``split="train"``) plays ``<dir>/train``, evaluation
(``split="eval"``) ``<dir>/eval``, where ``<dir>`` is ``data_dir`` (``--env-data``), else
``$TEXTWORLD_GAMES``, else ``<repo>/data/textworld``. ``data_dir`` may also be
- the ``train`` folder itself: evaluation then plays its sibling ``eval`` folder;
- a flat folder of games made before this layout (``*.z8`` directly in it, no ``train`` folder):
  training plays those games, evaluation ``<dir>/eval`` (``--count 0 --eval-count M`` adds it;
  the flat games are not in it, and the training glob does not descend into it).
An ``eval`` folder given as ``data_dir`` is refused (training would play the held-out games). A
missing or empty split folder raises FileNotFoundError naming the folder and the command that
makes it. ``make_games`` writes one flat folder of games (``split`` picks the seed stream).

The environment drives the two pieces directly instead of going through ``textworld.start``:

* jericho's ``FrotzEnv`` runs the story. Its ``get_state``/``set_state`` capture the whole
  Z-machine (memory, stack, registers, random number generator, pending text) in about 0.02 ms,
  so snapshots restore in O(1) without replaying.
* TextWorld's ``GameProgression`` tracks the logical state (facts, quest progress) from the
  Inform7 events the story prints after ``tw-trace-actions``, exactly like TextWorld's own
  ``StateTracking`` wrapper. The logical state is a pure function of the sequence of events that
  changed it (the *trace*), so a snapshot stores only that trace; the env caches the progression
  for each trace it has seen (LRU), which makes ``restore`` O(1) within a process and rebuilds it
  from the trace (logic only, no interpreter steps) after unpickling in another process.

Observations are the game's text with the ASCII-art banner, the debug tags, the status line and
the "RESTART, RESTORE ..." prompt removed, white space collapsed, followed by
``" Actions: "`` and the sorted admissible commands (none once the episode is over). A command
that is not admissible is not sent to the game: it is answered with
"That is not something you can do here." and the listed actions, and costs a step.

Reward: 1.0 exactly on the step that wins the game, 0.0 otherwise (TextWorld's intermediate quest
points are reported in ``info["score"]`` but not rewarded), so a won episode returns exactly 1.0.
An episode ends on a win, a loss, or after ``max_steps`` steps (admissible or not).

Milestones (Temporal GRPO): the subgoals of the game's winning plan from the start, i.e. its
commands other than ``go``/``look``/``examine``/``inventory`` (``base.plan_subgoals``); the last
one is the win. ``stages_completed`` counts the subgoals no longer in the winning plan from the
current state (``base.plan_stages_completed``), so it is a function of the logical state alone.

``import textworld`` happens only when an env is built or games are made, so this module imports
without the optional extra.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import random
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tempo_plugin.envs.base import (
    EpisodeProgress,
    StepResult,
    canonical_action,
    plan_stage_count,
    plan_stages_completed,
    with_action_list,
)

INSTALL_HINT = "the textworld environment needs: pip install -e .[textworld]"
GAMES_ENV_VAR = "TEXTWORLD_GAMES"
DEFAULT_GAMES_DIR = Path(__file__).resolve().parents[2] / "data" / "textworld"
FROTZ_SEED = 1234
"""Seed of the interpreter's random number generator (fixed: games must be deterministic)."""
LOGIC_CACHE_SIZE = 4096
"""Logical states kept per game (keyed by trace) for O(1) restore."""
TRAIN_SPLIT, EVAL_SPLIT = "train", "eval"
SPLITS = (TRAIN_SPLIT, EVAL_SPLIT)
DEFAULT_EVAL_COUNT = 64
"""Held-out games ``--make-games`` writes unless told (the trainer's default ``--eval-games``)."""
MAKE_GAMES_COMMAND = "python -m tempo_plugin.envs.textworld --make-games"
_EVAL_SEED_BASE = 2**31
"""Held-out games' generator seeds lie in [2^31, 2^32), training games' in [1, 2^31)."""

_INVALID = "That is not something you can do here."
_OVER = "The game is over."
_OUT_OF_STEPS = "You have run out of steps."
_WON_MARK = "*** The End ***"
_LOST_MARK = "*** You lost! ***"
_BANNER_LINE = re.compile(r"^[\s_|\\/$<>]+$")
_PROMPT_TAIL = re.compile(r"\n>[^\n]*\Z")
_I7_TAG = re.compile(r"\[[^]]+\]\n?")


def _require_textworld() -> None:
    try:
        importlib.import_module("jericho")
        importlib.import_module("textworld")
    except ImportError:
        raise ImportError(INSTALL_HINT) from None


def _clean(text: str) -> str:
    """Game text without the banner art, status line, replay prompt and runs of white space."""
    text = _PROMPT_TAIL.sub("", text)
    cut = text.find("Would you like to RESTART")
    if cut >= 0:
        text = text[:cut]
    lines = [line for line in text.splitlines() if not _BANNER_LINE.match(line)]
    return " ".join(" ".join(lines).split())


def _i7_events(raw: str) -> tuple[list[str], str]:
    """The succeeded Inform7 events in ``raw`` and the text without debug tags.

    Same rules as textworld.envs.wrappers.tw_inform7._detect_i7_events_debug_tags.
    """
    events = []
    for match in _I7_TAG.findall(raw):
        raw = raw.replace(match, "")
        name = match.strip()[1:-1]
        if " - succeeded" in name:
            events.append(name[: name.index(" - succeeded")])
    return [e for e in events if "(" not in e and ")" not in e], raw


# ---------------------------------------------------------------------------- game generation


def _game_seed(seed: int, index: int, attempt: int, split: str = TRAIN_SPLIT) -> int:
    """The generator seed of game ``index`` (training: [1, 2^31), held-out: [2^31, 2^32))."""
    if split == TRAIN_SPLIT:
        return random.Random(f"textworld:{seed}:{index}:{attempt}").randrange(1, 2**31)
    return _EVAL_SEED_BASE + random.Random(f"textworld:eval:{seed}:{index}:{attempt}").randrange(0, 2**31)


def make_games(
    out_dir: str | os.PathLike,
    count: int,
    seed: int,
    world_size: int = 3,
    nb_objects: int = 6,
    quest_length: int = 3,
    split: str = TRAIN_SPLIT,
) -> list[Path]:
    """Generate ``count`` games ``out_dir/game_00000.z8`` ... offline with TextWorld's generator.

    Equivalent to ``tw-make custom --world-size W --nb-objects O --quest-length L --seed S'``
    where ``S'`` is derived from (``seed``, index, ``split``); game ``i`` is the same for the same
    arguments, and the ``eval`` stream never uses a seed of the ``train`` stream. Games whose
    ``.z8`` and ``.json`` already exist are skipped. Progress goes to stderr. Returns the ``.z8``
    paths of all ``count`` games.
    """
    _require_textworld()
    import textworld
    from textworld.generator import QuestGenerationError

    for name, value in (("count", count), ("world_size", world_size), ("nb_objects", nb_objects),
                        ("quest_length", quest_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if split not in SPLITS:
        raise ValueError(f"unknown TextWorld split {split!r}: choose one of {', '.join(SPLITS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = out / f"game_{index:05d}.z8"
        paths.append(path)
        if path.is_file() and path.with_suffix(".json").is_file():
            continue
        start = time.time()
        for attempt in range(20):
            options = textworld.GameOptions()
            options.seeds = _game_seed(seed, index, attempt, split)
            options.nb_rooms = world_size
            options.nb_objects = nb_objects
            options.chaining.min_length = quest_length
            options.chaining.max_length = quest_length
            options.chaining.max_depth = quest_length
            options.path = str(path)
            options.file_ext = ".z8"
            options.force_recompile = True
            try:
                textworld.make(options)
                break
            except QuestGenerationError:
                continue
        else:
            raise RuntimeError(f"no quest of length {quest_length} could be generated for game {index}")
        ni = path.with_suffix(".ni")
        if ni.is_file():
            ni.unlink()  # the Inform7 source is not needed to play
        print(f"textworld: game {index + 1}/{count} -> {path} ({time.time() - start:.1f} s)",
              file=sys.stderr, flush=True)
    return paths


def make_layout(
    out_dir: str | os.PathLike,
    count: int,
    seed: int,
    eval_count: int = DEFAULT_EVAL_COUNT,
    world_size: int = 3,
    nb_objects: int = 6,
    quest_length: int = 3,
) -> tuple[list[Path], list[Path]]:
    """The training/evaluation layout: ``count`` games in ``out_dir/train`` and ``eval_count``
    held-out games (their own seed stream) in ``out_dir/eval``; either count may be 0, not both.
    Returns the ``.z8`` paths of (training games, held-out games)."""
    for name, value in (("count", count), ("eval_count", eval_count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if count == 0 and eval_count == 0:
        raise ValueError("nothing to make: --count and --eval-count are both 0")
    out = Path(out_dir)
    sizes = (world_size, nb_objects, quest_length)
    train = make_games(out / TRAIN_SPLIT, count, seed, *sizes, split=TRAIN_SPLIT) if count else []
    held_out = make_games(out / EVAL_SPLIT, eval_count, seed, *sizes, split=EVAL_SPLIT) if eval_count else []
    return train, held_out


def resolve_games_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """``data_dir``, else $TEXTWORLD_GAMES, else <repo>/data/textworld."""
    if data_dir:
        return Path(data_dir)
    if os.environ.get(GAMES_ENV_VAR):
        return Path(os.environ[GAMES_ENV_VAR])
    return DEFAULT_GAMES_DIR


def split_dir(data_dir: str | os.PathLike | None = None, split: str = TRAIN_SPLIT) -> Path:
    """The folder whose games ``split`` plays (see the module docstring's layout): ``<dir>/train``
    and ``<dir>/eval`` when ``<dir>/train`` exists; for a folder named ``train``, itself and its
    sibling ``eval``; for a flat folder, itself and ``<dir>/eval``. ValueError for an unknown
    split or a folder named ``eval`` without a ``train`` folder in it."""
    if split not in SPLITS:
        raise ValueError(f"unknown TextWorld split {split!r}: choose one of {', '.join(SPLITS)}")
    root = resolve_games_dir(data_dir)
    if (root / TRAIN_SPLIT).is_dir():
        return root / split
    if root.name == TRAIN_SPLIT:
        return root if split == TRAIN_SPLIT else root.parent / EVAL_SPLIT
    if root.name == EVAL_SPLIT:
        raise ValueError(f"TextWorld games {root} are the held-out evaluation games: point --env-data (or "
                         f"${GAMES_ENV_VAR}) at the folder holding train/ and eval/")
    return root if split == TRAIN_SPLIT else root / EVAL_SPLIT


def find_games(data_dir: str | os.PathLike | None = None, split: str = TRAIN_SPLIT) -> tuple[Path, list[Path]]:
    """The folder of ``split``'s games (:func:`split_dir`) and its sorted ``*.z8`` files that have
    a ``.json`` next to them (not those of sub-folders)."""
    directory = split_dir(data_dir, split)
    games = sorted(p.resolve() for p in directory.glob("*.z8") if p.with_suffix(".json").is_file())
    return directory, games


def no_games_message(directory: Path, split: str = TRAIN_SPLIT) -> str:
    """The one-line error for a split folder without games, with the command that makes them."""
    if split == TRAIN_SPLIT:
        root = directory.parent if directory.name == TRAIN_SPLIT else directory
        return (f"no TextWorld games (*.z8 with .json) in {directory}: make some with "
                f"{MAKE_GAMES_COMMAND} {root} --count 100 --seed 0")
    root = directory.parent
    return (f"no held-out TextWorld games (*.z8 with .json) in {directory}, which evaluation plays (training never "
            f"does): make them with {MAKE_GAMES_COMMAND} {root} --count 0 --eval-count {DEFAULT_EVAL_COUNT}, "
            f"or pass --eval-games 0 to skip the evaluation")


# ---------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class _Logic:
    """An immutable logical state: never mutate ``progression`` (copy, then update)."""

    progression: Any  # textworld.generator.game.GameProgression
    admissible: tuple[str, ...]
    admissible_set: frozenset
    plan: Optional[tuple[str, ...]]
    score: int


class _Game:
    """One loaded game: its logic, the interpreter state at its start, and the logic cache."""

    def __init__(self, path: Path) -> None:
        from textworld.generator.game import Game, GameProgression
        from textworld.generator.inform7 import Inform7Game

        self.path = path
        self.game = Game.load(str(path.with_suffix(".json")))
        self.inform7 = Inform7Game(self.game)
        self.objective: str = " ".join(self.game.objective.split())
        self.max_score: int = int(self.game.max_score)
        self.initial_logic = self._logic(GameProgression(self.game, track_quests=True))
        self.stage_count: int = plan_stage_count(self.initial_logic.plan)
        self.start_state: Any = None  # interpreter state after reset + tw-trace-actions
        self.start_text: str = ""
        self._cache: collections.OrderedDict[tuple[str, ...], _Logic] = collections.OrderedDict()

    def _logic(self, progression: Any) -> _Logic:
        commands = sorted(set(self.inform7.gen_commands_from_actions(progression.valid_actions)))
        admissible = tuple(canonical_action(c) for c in commands)
        policy = progression.winning_policy
        plan = None
        if policy is not None:
            plan = tuple(canonical_action(c) for c in self.inform7.gen_commands_from_actions(policy))
        return _Logic(progression, admissible, frozenset(admissible), plan, int(progression.score))

    def advance(self, logic: _Logic, trace: tuple[str, ...], event: str) -> Optional[_Logic]:
        """The logic after ``event`` (``trace`` ends with it), or None if the event changes nothing."""
        cached = self._cache.get(trace)
        if cached is not None:
            self._cache.move_to_end(trace)
            return cached
        action = self.inform7.detect_action(event, logic.progression.valid_actions)
        if action is None:
            return None
        progression = logic.progression.copy()
        progression.update(action)
        new = self._logic(progression)
        self._cache[trace] = new
        if len(self._cache) > LOGIC_CACHE_SIZE:
            self._cache.popitem(last=False)
        return new

    def logic_for(self, trace: tuple[str, ...]) -> _Logic:
        """The logic after ``trace`` from the start; ValueError if the trace does not fit."""
        if not trace:
            return self.initial_logic
        cached = self._cache.get(trace)
        if cached is not None:
            self._cache.move_to_end(trace)
            return cached
        logic = self.initial_logic
        for i, event in enumerate(trace):
            new = self.advance(logic, trace[: i + 1], event)
            if new is None:
                raise ValueError(f"event {event!r} does not apply in game {self.path.name}")
            logic = new
        return logic


@dataclass(frozen=True, eq=False)
class TextWorldSnapshot:
    """A picklable copy of a :class:`TextWorldEnv` state.

    ``frotz_state`` is jericho's full interpreter state; ``trace`` the Inform7 events that changed
    the logical state since the start (the logic is rebuilt or looked up from it).
    """

    game_file: str
    seed: int
    max_steps: int
    frotz_state: tuple
    trace: tuple[str, ...]
    steps: int
    done: bool
    won: bool
    lost: bool
    feedback: str
    observation: str


class TextWorldEnv(EpisodeProgress):
    """A TextWorld game; implements :class:`tempo_plugin.envs.base.Env` with O(1) snapshots.

    Args:
        data_dir: directory of generated games (the layout of the module docstring, or a flat
            folder of ``*.z8`` + ``*.json``); default $TEXTWORLD_GAMES, else ``<repo>/data/textworld``.
        max_steps: the episode ends (not won) after this many steps.
        split: ``train`` (what training plays) or ``eval`` (the held-out games evaluation plays).

    ``data_dir`` is the folder the games are read from (the split's). A missing or empty split
    folder raises FileNotFoundError (one line naming it and the command that makes it).
    """

    supports_snapshot: bool = True

    def __init__(self, data_dir: str | None = None, max_steps: int = 40, split: str = TRAIN_SPLIT) -> None:
        _require_textworld()
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        warnings.filterwarnings("ignore", module="jericho")
        directory, games = find_games(data_dir, split)
        if not games:
            raise FileNotFoundError(no_games_message(directory, split))
        self.split = split
        self.data_dir = directory
        self.games: list[Path] = games
        self.max_steps = max_steps
        self._loaded: dict[str, _Game] = {}
        self._frotz: Any = None
        self._story: Optional[str] = None  # the story file the interpreter has loaded
        self._game: Optional[_Game] = None
        self._seed = 0
        self._logic: Optional[_Logic] = None
        self._trace: tuple[str, ...] = ()
        self._steps = 0
        self._done = False
        self._won = False
        self._lost = False
        self._feedback = ""
        self._observation = ""

    def __repr__(self) -> str:
        name = None if self._game is None else self._game.path.name
        return (f"TextWorldEnv(data_dir={str(self.data_dir)!r}, split={self.split!r}, max_steps={self.max_steps}, "
                f"game={name!r})")

    # ------------------------------------------------------------------ loading

    def _load(self, path: Path) -> _Game:
        """The cached game for ``path``, with the interpreter switched to it."""
        key = str(path)
        game = self._loaded.get(key)
        if game is None:
            game = self._loaded[key] = _Game(path)
        if self._story != key:
            import jericho

            if self._frotz is None:
                self._frotz = jericho.FrotzEnv(key, FROTZ_SEED)
            else:
                self._frotz.load(key, FROTZ_SEED)
            self._story = key
        if game.start_state is None:
            raw, _ = self._frotz.reset()
            self._frotz.step("tw-trace-actions")  # print Inform7 events, as TextWorld does
            game.start_state = self._frotz.get_state()
            game.start_text = _clean(_i7_events(raw)[1])
        return game

    def _require_game(self) -> _Game:
        if self._game is None:
            raise RuntimeError("TextWorldEnv has no game yet; call reset(seed) first")
        return self._game

    # ------------------------------------------------------------------ accessors

    @property
    def task(self) -> str:
        """The game's objective."""
        return self._require_game().objective

    @property
    def seed(self) -> int:
        self._require_game()
        return self._seed

    @property
    def game_file(self) -> Path:
        return self._require_game().path

    @property
    def score(self) -> int:
        """TextWorld's quest points so far (not the reward)."""
        self._require_game()
        assert self._logic is not None
        return self._logic.score

    @property
    def stage_count(self) -> int:
        """Milestones of the current game (Temporal GRPO's stages): the subgoals of its winning
        plan from the start (at least 1); the last one is the win."""
        return self._require_game().stage_count

    def stages_completed(self) -> int:
        """Milestones reached in the current state: ``stage_count`` once won, else the start
        plan's subgoals missing from the winning plan from here (0 after a loss: no plan left);
        read from the logical state, so a restored snapshot reports the same value."""
        game = self._require_game()
        assert self._logic is not None
        return plan_stages_completed(game.stage_count, self._won, self._logic.plan)

    def _compose(self) -> str:
        if self._done:
            return self._feedback
        return with_action_list(self._feedback, self.admissible_actions())

    # ------------------------------------------------------------------ Env protocol

    def reset(self, seed: int) -> str:
        """Start game ``sorted_games[seed % n]`` from its beginning and return the observation."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        game = self._load(self.games[seed % len(self.games)])
        self._frotz.set_state(game.start_state)
        self._game = game
        self._seed = seed
        self._logic = game.initial_logic
        self._trace = ()
        self._steps = 0
        self._done = self._won = self._lost = False
        self._feedback = game.start_text
        self._observation = self._compose()
        return self._observation

    def admissible_actions(self) -> list[str]:
        """The sorted admissible commands (empty once the episode is over)."""
        self._require_game()
        if self._done:
            return []
        assert self._logic is not None
        return list(self._logic.admissible)

    def step(self, action: str) -> StepResult:
        """Play ``action``; inadmissible ones are answered without touching the game."""
        game = self._require_game()
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset()")
        assert self._logic is not None
        self._steps += 1
        command = canonical_action(action) if isinstance(action, str) else ""
        admissible = command in self._logic.admissible_set
        reward = 0.0
        if admissible:
            raw = self._frotz.step(command)[0]
            events, text = _i7_events(raw)
            for event in events:
                trace = self._trace + (event,)
                logic = game.advance(self._logic, trace, event)
                if logic is not None:
                    self._logic, self._trace = logic, trace
            self._won = _WON_MARK in text
            self._lost = _LOST_MARK in text and not self._won
            self._done = self._won or self._lost
            self._feedback = _clean(text)
            if self._won:
                reward = 1.0
        else:
            self._feedback = _INVALID
        if not self._done and self._steps >= self.max_steps:
            self._done = True
            self._feedback = f"{self._feedback} {_OUT_OF_STEPS}"
        self._observation = self._compose()
        info = {"admissible": admissible, "score": self._logic.score, "max_score": game.max_score,
                "lost": self._lost}
        return StepResult(self._observation, reward, self._done, self._won, info)

    def _plan(self) -> Optional[tuple[str, ...]]:
        self._require_game()
        if self._done:
            return None
        assert self._logic is not None
        return self._logic.plan

    def privileged_info(self) -> str:
        """The remaining winning plan from the current state; for the critic only."""
        self._require_game()
        if self._done:
            return _OVER
        plan = self._plan()
        if not plan:
            return "No winning plan from here: the quest can no longer be completed."
        return f"Winning plan from here ({len(plan)} steps): {', '.join(plan)}."

    def expert_action(self) -> Optional[str]:
        """The first action of the remaining winning plan, or None when there is none."""
        plan = self._plan()
        return plan[0] if plan else None

    def snapshot(self) -> TextWorldSnapshot:
        """The full state: interpreter state, logic trace and bookkeeping (about 0.05 ms)."""
        game = self._require_game()
        return TextWorldSnapshot(
            game_file=str(game.path),
            seed=self._seed,
            max_steps=self.max_steps,
            frotz_state=self._frotz.get_state(),
            trace=self._trace,
            steps=self._steps,
            done=self._done,
            won=self._won,
            lost=self._lost,
            feedback=self._feedback,
            observation=self._observation,
        )

    def restore(self, snapshot: TextWorldSnapshot) -> None:
        """Put this env exactly in the snapshot's state, loading its game if needed.

        Raises TypeError for a non-snapshot, ValueError when the snapshot comes from an env with
        another ``max_steps``, its game file is missing, or its trace does not fit the game.
        """
        if not isinstance(snapshot, TextWorldSnapshot):
            raise TypeError(f"restore() needs a TextWorldSnapshot, got {type(snapshot).__name__}")
        if snapshot.max_steps != self.max_steps:
            raise ValueError(f"snapshot was taken with max_steps={snapshot.max_steps}; this env has {self.max_steps}")
        path = Path(snapshot.game_file)
        if str(path) not in self._loaded and not (path.is_file() and path.with_suffix(".json").is_file()):
            raise ValueError(f"snapshot game {path} is missing")
        game = self._load(path)
        logic = game.logic_for(snapshot.trace)
        self._frotz.set_state(snapshot.frotz_state)
        self._game = game
        self._seed = snapshot.seed
        self._logic = logic
        self._trace = snapshot.trace
        self._steps = snapshot.steps
        self._done = snapshot.done
        self._won = snapshot.won
        self._lost = snapshot.lost
        self._feedback = snapshot.feedback
        self._observation = snapshot.observation


# ---------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tempo_plugin.envs.textworld",
        description="Generate TextWorld games offline: DIR/train (training) and DIR/eval (held-out evaluation).",
    )
    parser.add_argument("--make-games", metavar="DIR", required=True,
                        help="write training games to DIR/train and held-out games to DIR/eval")
    parser.add_argument("--count", type=int, required=True, help="training games (0: only the held-out ones)")
    parser.add_argument("--eval-count", type=int, default=DEFAULT_EVAL_COUNT,
                        help="held-out evaluation games, from a seed stream of their own (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (game i is a function of seed, i)")
    parser.add_argument("--world-size", type=int, default=3, help="rooms per game")
    parser.add_argument("--nb-objects", type=int, default=6, help="objects per game")
    parser.add_argument("--quest-length", type=int, default=3, help="actions the quest needs")
    args = parser.parse_args(argv)
    try:
        train, held_out = make_layout(args.make_games, args.count, args.seed, args.eval_count, args.world_size,
                                      args.nb_objects, args.quest_length)
    except (ImportError, ValueError, RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    out = Path(args.make_games)
    print(f"{len(train)} training games in {out / TRAIN_SPLIT}, {len(held_out)} held-out games in {out / EVAL_SPLIT}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""ALFWorldEnv: ALFWorld's household tasks (TextWorld mode) behind the TEMPO Env protocol.

An ALFWorld game is a directory holding ``traj_data.json`` (``task_type``, ``pddl_params``) and
``game.tw-pddl``: a JSON file with ``pddl_domain`` (alfred.pddl), ``grammar`` (alfred.twl2 with
"UNKNOWN GOAL" replaced by the task sentence), ``pddl_problem``, ``solvable`` and ``walkthrough``.
Games are played with TextWorld's ``PddlEnv`` (fast-downward keeps the state) wrapped in ALFWorld's
``AlfredDemangler`` (object ids become "apple 1", "sinkbasin 1", ...).

Where the games come from: ``data_dir`` (``--env-data``), else ``$ALFWORLD_DATA``, else
``<repo>/data/alfworld`` (``resolve_data_dir``). ``python -m tempo_plugin.envs.alfworld --download``
fetches the official games (needs network) into ``$ALFWORLD_DATA`` (default ``data/alfworld``);
``python -m tempo_plugin.envs.alfworld --make-fixtures DIR`` assembles the small hand-written
offline games of ``data/alfworld_fixtures`` (one room each), solving each with the fast-downward
planner to fill in ``solvable`` and ``walkthrough``.

Splits (``split_dir``): the official download holds ``json_2.1.1/{train,valid_seen,valid_unseen}``.
Training plays ``train``; the held-out evaluation (``ALFWorldEnv(split=...)``, the trainer's
``--eval-split``) plays ``valid_unseen`` (default) or ``valid_seen``. ``data_dir`` may be
- the data root: a folder holding ``json_2.1.1`` or the split folders themselves; each split is
  then ``<root>/<split>`` (a missing ``train`` is an error, never a fall-back to the whole root);
- one split folder (named ``train``, ``valid_seen`` or ``valid_unseen``): training plays it and
  evaluation plays the sibling folder ``<parent>/<split>``; pointing it at the evaluation split
  itself is an error (evaluation would play the training games);
- any other folder of games (e.g. the fixture games): training plays every game under it, and
  evaluation needs ``<folder>/<split>``, which such a folder does not have: the evaluation env
  raises FileNotFoundError naming the folder and the download command. There are no held-out
  offline games; with the fixtures, train with ``--eval-games 0``.
Discovery (``discover_games``) walks everything under the split folder it is given.

Design:
- ``reset(seed)`` plays ``games[seed % len(games)]`` (games sorted by path). The loaded game is
  kept per env, so resetting to the same game only rebuilds the PDDL state.
- The observation is the engine's text followed by `` Actions: `` and the engine's admissible
  commands (sorted, as the engine gives them). All of them are listed, including the meta commands
  ``look``, ``inventory``, ``examine ...`` and ``help``: they are legal ALFWorld moves that cost a
  step, and listing exactly the engine's set keeps the observation a pure function of the state.
- ``step`` sends the canonical action to the engine; an inadmissible one gets the engine's
  "Nothing happens." and never raises. Reward is 1.0 exactly on the winning step; the episode ends
  on a win or after ``max_steps`` steps (admissible or not).
- ``privileged_info``/``expert_action`` ask the fast-downward planner (the same planner that
  ALFWorld's ``AlfredExpert(expert_type="planner")`` uses) for a plan from the *current* state, so
  they stay right after the agent leaves the walkthrough. The plan is computed lazily and cached
  until the next step. Planning does not change the game state.
- Milestones (Temporal GRPO): the subgoals of the planner's plan from the game's start, i.e. its
  commands other than ``go to``/``look``/``examine``/``inventory`` (``base.plan_subgoals``),
  counted once per game file and process; the last one is the win. ``stages_completed`` counts
  the subgoals no longer in the plan from the current state (``base.plan_stages_completed``), so
  it costs one planner call per step (cached, as for ``expert_plan``). The planner's start plan
  is used rather than the game file's walkthrough so that the start state reports exactly 0.
- TextWorld's ``PddlEnv.copy()`` is not implemented, so ``supports_snapshot`` is False: the state
  code restores by ``reset(seed)`` plus replaying the action history and checks the observation
  character by character. Replays are deterministic (the grammar has no random choices).

alfworld and textworld are imported only inside functions: importing this module works without
them; building the env without them raises ImportError naming the extra to install.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from tempo_plugin.envs.base import (
    EpisodeProgress,
    StepResult,
    canonical_action,
    plan_stage_count,
    plan_stages_completed,
    with_action_list,
)

INSTALL_HINT = "the alfworld environment needs: pip install -e .[alfworld]"

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""ALFWorld's six task types (``alfworld.agents.environment.alfred_tw_env.TASK_TYPES``)."""

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = REPO_ROOT / "data" / "alfworld"
FIXTURE_DIR = REPO_ROOT / "data" / "alfworld_fixtures"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
PROBLEM_FILE = "initial_state.pddl"
SKIPPED_PATH_PARTS = ("movable", "Sliced")
"""ALFWorld's own rule: games whose path contains these are not supported in TextWorld mode."""

MAKE_FIXTURES_COMMAND = "python -m tempo_plugin.envs.alfworld --make-fixtures"
DOWNLOAD_COMMAND = "python -m tempo_plugin.envs.alfworld --download"
JSON_DIR = "json_2.1.1"
"""The folder of the official download that holds the split folders."""
TRAIN_SPLIT = "train"
EVAL_SPLITS: tuple[str, ...] = ("valid_unseen", "valid_seen")
"""The held-out splits evaluation may play (``--eval-split``); the first is the default."""
SPLITS: tuple[str, ...] = (TRAIN_SPLIT, *EVAL_SPLITS)

_TASK_PATTERN = re.compile(r"Your task is to: (.*?)\.?\s*$", re.DOTALL)
_OVER = "The game is over."
_STAGE_COUNTS: dict[Path, int] = {}
"""Milestones per game file (from its start plan), shared by the envs of a process."""


# ---------------------------------------------------------------------- optional imports


def _require_packages() -> None:
    """Raise ImportError(INSTALL_HINT) when textworld[pddl] or alfworld is missing."""
    import importlib

    saved = os.environ.get("ALFWORLD_DATA")  # importing alfworld may set it (see _alfworld_api)
    try:
        for module in ("alfworld", "fast_downward", "textworld", "textworld.envs.pddl"):
            importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error})") from error
    finally:
        if saved is None:
            os.environ.pop("ALFWORLD_DATA", None)
        else:
            os.environ["ALFWORLD_DATA"] = saved


def _alfworld_api() -> tuple[Any, Any, Any]:
    """(textworld, PddlEnv, AlfredDemangler), imported without letting alfworld touch $ALFWORLD_DATA.

    ``alfworld.info`` sets ``$ALFWORLD_DATA`` to ``~/.cache/alfworld`` when it is unset, which
    would change where later envs look for games; the variable is put back as it was.
    """
    _require_packages()
    saved = os.environ.get("ALFWORLD_DATA")
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv
    finally:
        if saved is None:
            os.environ.pop("ALFWORLD_DATA", None)
        else:
            os.environ["ALFWORLD_DATA"] = saved
    return textworld, PddlEnv, AlfredDemangler


def _logic_files() -> tuple[Path, Path]:
    """Paths of the alfred.pddl domain and alfred.twl2 grammar shipped in the alfworld wheel."""
    _require_packages()
    import alfworld

    data = Path(alfworld.__file__).resolve().parent / "data"
    return data / "alfred.pddl", data / "alfred.twl2"


# ---------------------------------------------------------------------- game discovery


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``data_dir``, else ``$ALFWORLD_DATA``, else ``<repo>/data/alfworld``."""
    if data_dir:
        return Path(data_dir).expanduser()
    env_dir = os.environ.get("ALFWORLD_DATA")
    if env_dir:
        return Path(env_dir).expanduser()
    return DEFAULT_DATA_DIR


def split_dir(data_dir: str | os.PathLike[str] | None = None, split: str = TRAIN_SPLIT) -> Path:
    """The folder whose games ``split`` plays, for ``data_dir`` as :func:`resolve_data_dir` finds it.

    A data root (holding ``json_2.1.1``, or ``train``/``valid_seen``/``valid_unseen`` folders)
    gives ``<root>/<split>``; a folder named after a split gives itself for ``train`` and its
    sibling ``<parent>/<split>`` for an evaluation split; any other folder gives itself for
    ``train`` and ``<folder>/<split>`` for an evaluation split. The folder may not exist (the env
    then raises FileNotFoundError). ValueError for an unknown split, or when an evaluation split
    would be the folder training plays.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}: choose one of {', '.join(SPLITS)}")
    root = resolve_data_dir(data_dir)
    if (root / JSON_DIR).is_dir():
        root = root / JSON_DIR
    if any((root / name).is_dir() for name in SPLITS):
        return root / split
    if split == TRAIN_SPLIT:
        return root
    if root.name in SPLITS:
        if root.name == split:
            raise ValueError(
                f"ALFWorld data {root} is the {split} split, which evaluation plays: point --env-data (or "
                f"$ALFWORLD_DATA) at the folder holding train/ and {split}/ (or at train/), not at {split}/"
            )
        return root.parent / split
    return root / split


def discover_games(root: str | os.PathLike[str]) -> list[Path]:
    """The ``game.tw-pddl`` files of the playable games under ``root``, sorted by path.

    A game is a directory holding ``traj_data.json`` and ``game.tw-pddl`` whose ``task_type`` is one
    of :data:`TASK_TYPES` and whose game file says ``"solvable": true``; directories whose path
    below ``root`` contains "movable" or "Sliced" are skipped (ALFWorld's rule). A missing
    ``root`` gives an empty list; a file that is not valid JSON raises ValueError naming it.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    games: list[Path] = []
    for directory, _dirs, files in os.walk(root):
        if TRAJ_FILE not in files or GAME_FILE not in files:
            continue
        relative = os.path.relpath(directory, root)
        if any(part in relative for part in SKIPPED_PATH_PARTS):
            continue
        path = Path(directory)
        traj = _read_json(path / TRAJ_FILE)
        if not isinstance(traj, dict) or traj.get("task_type") not in TASK_TYPES:
            continue
        game = _read_json(path / GAME_FILE)
        if not isinstance(game, dict) or game.get("solvable") is not True:
            continue
        games.append(path / GAME_FILE)
    return sorted(games)


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read ALFWorld file {path}: {error}") from error


def no_games_message(root: Path) -> str:
    """The one-line error for a training directory without playable games."""
    return (
        f"no solvable ALFWorld games under {root}: run `{DOWNLOAD_COMMAND}` (official games, needs "
        f"network) or `{MAKE_FIXTURES_COMMAND} {root}` (small offline games)"
    )


def no_held_out_games_message(folder: Path, split: str) -> str:
    """The one-line error for a missing or empty evaluation split folder."""
    return (
        f"no held-out ALFWorld games in {folder} (the {split} split, which evaluation plays; training never "
        f"does): run `{DOWNLOAD_COMMAND}` (official train/valid_seen/valid_unseen splits, needs network) and "
        f"point --env-data at the folder holding them, or pass --eval-games 0 to skip the evaluation"
    )


# ---------------------------------------------------------------------- fixture games


def task_sentence(traj: dict[str, Any]) -> str:
    """The goal sentence of a traj_data.json: its ``task_desc``, else ALFWorld's first template."""
    desc = traj.get("task_desc")
    if isinstance(desc, str) and desc.strip():
        return desc.strip().rstrip(".")
    from alfworld.gen import goal_library

    params = traj["pddl_params"]
    goal = traj["task_type"] + ("_slice" if params.get("object_sliced") else "")
    template = goal_library.gdict[goal]["templates"][0]
    return template.format(
        obj=params["object_target"].lower(),
        recep=params["parent_target"].lower(),
        toggle=params.get("toggle_target", "").lower(),
        mrecep=params.get("mrecep_target", "").lower(),
    )


def solve_game(game_file: str | os.PathLike[str], max_steps: int = 200) -> Optional[list[str]]:
    """Plan ``game_file`` from its start with fast-downward and play the plan to check it.

    Returns the plan (the walkthrough) when playing it wins, None when there is no plan or the
    plan does not win within ``max_steps``.
    """
    textworld, PddlEnv, AlfredDemangler = _alfworld_api()
    infos = textworld.EnvInfos(admissible_commands=True, won=True, policy_commands=True)
    engine = AlfredDemangler(PddlEnv(infos))
    engine.load(str(game_file))
    state = engine.reset()
    plan = list(state["policy_commands"] or [])
    if not plan or len(plan) > max_steps:
        return None
    for command in plan:
        state, _score, _done = engine.step(command)
    return plan if state["won"] else None


def make_fixture_games(
    out_dir: str | os.PathLike[str], fixture_dir: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Assemble the hand-written fixture problems into playable ALFWorld games under ``out_dir``.

    Each directory of ``fixture_dir`` (default ``data/alfworld_fixtures``) holding
    ``initial_state.pddl`` and ``traj_data.json`` becomes ``out_dir/<name>/game.tw-pddl`` (the
    installed alfworld's domain and grammar, the task sentence in the grammar, the problem) with
    ``solvable``/``walkthrough`` computed by :func:`solve_game`, and a copy of traj_data.json.
    Returns the written game files, sorted.
    """
    source = Path(fixture_dir) if fixture_dir is not None else FIXTURE_DIR
    domain_path, grammar_path = _logic_files()
    domain = domain_path.read_text(encoding="utf-8")
    grammar = grammar_path.read_text(encoding="utf-8")
    out = Path(out_dir)
    written: list[Path] = []
    for problem in sorted(source.glob(f"*/{PROBLEM_FILE}")):
        traj_path = problem.parent / TRAJ_FILE
        if not traj_path.is_file():
            continue
        traj = _read_json(traj_path)
        target = out / problem.parent.name
        target.mkdir(parents=True, exist_ok=True)
        game_file = target / GAME_FILE
        game = {
            "pddl_domain": domain,
            "grammar": grammar.replace("UNKNOWN GOAL", task_sentence(traj)),
            "pddl_problem": problem.read_text(encoding="utf-8"),
            "solvable": None,
            "walkthrough": None,
        }
        game_file.write_text(json.dumps(game), encoding="utf-8")
        walkthrough = solve_game(game_file)
        game["solvable"] = walkthrough is not None
        game["walkthrough"] = walkthrough
        game_file.write_text(json.dumps(game), encoding="utf-8")
        shutil.copyfile(traj_path, target / TRAJ_FILE)
        written.append(game_file)
    return written


# ---------------------------------------------------------------------- the environment


class ALFWorldEnv(EpisodeProgress):
    """ALFWorld (TextWorld mode); implements :class:`tempo_plugin.envs.base.Env` without snapshots.

    Args:
        data_dir: where to look for games (see :func:`resolve_data_dir`).
        max_steps: the episode ends after this many steps (admissible or not).
        split: ``train`` (what training plays) or a held-out split, ``valid_unseen`` or
            ``valid_seen`` (what evaluation plays); :func:`split_dir` says which folder that is.

    ``data_dir`` is the folder the games are discovered in (the split's folder). Raises ImportError
    when alfworld/textworld[pddl] are missing, ValueError for a bad split (see :func:`split_dir`)
    and FileNotFoundError (one line naming the folder and the command that makes it) when the
    split's folder holds no playable game.
    """

    supports_snapshot: bool = False

    def __init__(self, data_dir: str | None = None, max_steps: int = 40, split: str = TRAIN_SPLIT) -> None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        _require_packages()
        self.split: str = split
        self.data_dir: Path = split_dir(data_dir, split)
        self.max_steps: int = max_steps
        self.games: list[Path] = discover_games(self.data_dir)
        if not self.games:
            if split == TRAIN_SPLIT:
                raise FileNotFoundError(no_games_message(self.data_dir))
            raise FileNotFoundError(no_held_out_games_message(self.data_dir, split))
        textworld, PddlEnv, AlfredDemangler = _alfworld_api()
        infos = textworld.EnvInfos(admissible_commands=True, won=True, feedback=True)
        self._engine: Any = AlfredDemangler(PddlEnv(infos))
        self._loaded: Optional[Path] = None
        self._seed: Optional[int] = None
        self._task: str = ""
        self._feedback: str = ""
        self._admissible: list[str] = []
        self._observation: str = ""
        self._steps: int = 0
        self._done: bool = False
        self._won: bool = False
        self._plan: Optional[list[str]] = None
        self._stage_count: int = 1

    def __repr__(self) -> str:
        return (
            f"ALFWorldEnv(data_dir={str(self.data_dir)!r}, split={self.split!r}, max_steps={self.max_steps}, "
            f"games={len(self.games)}, seed={self._seed})"
        )

    # ------------------------------------------------------------------ accessors

    def _require_game(self) -> None:
        if self._seed is None:
            raise RuntimeError("ALFWorldEnv has no game yet; call reset(seed) first")

    @property
    def game_file(self) -> Path:
        """The game.tw-pddl file being played."""
        self._require_game()
        assert self._loaded is not None
        return self._loaded

    @property
    def seed(self) -> int:
        self._require_game()
        assert self._seed is not None
        return self._seed

    @property
    def task(self) -> str:
        """The goal sentence, e.g. "put a clean apple in fridge"."""
        self._require_game()
        return self._task

    @property
    def walkthrough(self) -> Optional[list[str]]:
        """The game file's walkthrough from the start (None if it has none)."""
        self._require_game()
        walkthrough = getattr(self._engine, "walkthrough", None)
        return list(walkthrough) if walkthrough else None

    # ------------------------------------------------------------------ engine glue

    def _absorb(self, state: Any) -> None:
        """Take feedback, admissible commands and the win flag from a TextWorld GameState."""
        self._feedback = str(state.feedback or "").strip()
        self._admissible = list(state["admissible_commands"] or [])
        self._won = bool(state["won"])
        self._plan = None

    def _render(self) -> str:
        if self._done:
            return f"{self._feedback} {_OVER}"
        return with_action_list(self._feedback, self._admissible)

    # ------------------------------------------------------------------ Env protocol

    def reset(self, seed: int) -> str:
        """Start ``games[seed % len(games)]`` and return its first observation."""
        import operator

        seed = operator.index(seed)
        game_file = self.games[seed % len(self.games)]
        if self._loaded != game_file:
            self._loaded = None
            self._engine.load(str(game_file))
            self._loaded = game_file
        state = self._engine.reset()
        self._seed = seed
        self._steps = 0
        self._done = False
        self._absorb(state)
        match = _TASK_PATTERN.search(self._feedback)
        self._task = match.group(1).strip() if match else ""
        if game_file not in _STAGE_COUNTS:
            _STAGE_COUNTS[game_file] = plan_stage_count(self._current_plan())
        self._stage_count = _STAGE_COUNTS[game_file]
        self._observation = self._render()
        return self._observation

    def admissible_actions(self) -> list[str]:
        """The engine's admissible commands, in the order the observation lists them."""
        self._require_game()
        return [] if self._done else list(self._admissible)

    def step(self, action: str) -> StepResult:
        """Apply ``action``; an inadmissible one gets "Nothing happens." and changes nothing."""
        self._require_game()
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset()")
        command = canonical_action(action) if isinstance(action, str) else ""
        admissible = command in self._admissible
        state, _score, _engine_done = self._engine.step(command)
        self._steps += 1
        self._absorb(state)
        reward = 1.0 if self._won else 0.0
        self._done = self._won or self._steps >= self.max_steps
        self._observation = self._render()
        return StepResult(self._observation, reward, self._done, self._won, {"admissible": admissible})

    def _current_plan(self) -> list[str]:
        """A shortest plan from the current state (fast-downward), cached until the next step;
        [] when the goal is unreachable."""
        if self._plan is None:
            engine = self._engine.unwrapped
            self._plan = list(engine._pddl_state.replan(engine._entity_infos) or [])
        return self._plan

    def expert_plan(self) -> list[str]:
        """A shortest plan from the current state (fast-downward); [] when over or unreachable."""
        self._require_game()
        if self._done:
            return []
        return list(self._current_plan())

    @property
    def stage_count(self) -> int:
        """Milestones of the current game (Temporal GRPO's stages): the subgoals of the planner's
        plan from its start (at least 1); the last one is the win."""
        self._require_game()
        return self._stage_count

    def stages_completed(self) -> int:
        """Milestones reached in the current state: ``stage_count`` once won, else the start
        plan's subgoals missing from the plan from here (0 when no plan reaches the goal); a
        function of the game state, so replaying the same actions reports the same value."""
        self._require_game()
        return plan_stages_completed(self._stage_count, self._won, None if self._won else self._current_plan())

    def privileged_info(self) -> str:
        """The expert plan from the current state; for the critic only, never the actor."""
        self._require_game()
        if self._done:
            return _OVER
        plan = self.expert_plan()
        if not plan:
            return f"No plan reaches the goal ({self._task}) from here."
        steps = "step" if len(plan) == 1 else "steps"
        return f"Expert plan from here: {', '.join(plan)} ({len(plan)} {steps})."

    def expert_action(self) -> Optional[str]:
        """The first action of the expert plan, or None when the game is over or unwinnable."""
        plan = self.expert_plan()
        return plan[0] if plan else None

    def snapshot(self) -> Any:
        raise NotImplementedError("ALFWorldEnv has no snapshots; restore by reset(seed) + replay")

    def restore(self, snapshot: Any) -> None:
        raise NotImplementedError("ALFWorldEnv has no snapshots; restore by reset(seed) + replay")


# ---------------------------------------------------------------------- command line


def download(data_dir: str | os.PathLike[str] | None = None) -> int:
    """Run the alfworld package's ``alfworld-download`` into ``data_dir`` (default $ALFWORLD_DATA,
    else data/alfworld). Prints one line and returns 1 when it fails."""
    target = Path(data_dir) if data_dir else resolve_data_dir(None)
    hint = f"`{MAKE_FIXTURES_COMMAND} data/alfworld` gives small offline games"
    try:
        _require_packages()
    except ImportError as error:
        print(f"alfworld-download is not available: {error}; {hint}", file=sys.stderr)
        return 1
    script = shutil.which("alfworld-download") or str(Path(sys.executable).parent / "alfworld-download")
    if not Path(script).is_file():
        print(f"alfworld-download failed: the script is not installed; {hint}", file=sys.stderr)
        return 1
    env = dict(os.environ, ALFWORLD_DATA=str(target))
    try:
        result = subprocess.run(
            [sys.executable, script, "--data-dir", str(target)],
            env=env,
            capture_output=True,
            text=True,
        )
    except OSError as error:
        print(f"alfworld-download failed ({error}); {hint}", file=sys.stderr)
        return 1
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"exit status {result.returncode}"
        print(f"alfworld-download into {target} failed ({reason}); {hint}", file=sys.stderr)
        return 1
    print(f"ALFWorld games downloaded into {target}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tempo_plugin.envs.alfworld", description="Get ALFWorld games for ALFWorldEnv."
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--make-fixtures", metavar="DIR",
        help="assemble the small offline fixture games into DIR (for training and tests: they have no held-out split)",
    )
    group.add_argument(
        "--download",
        action="store_true",
        help="download the official games (json_2.1.1/train, valid_seen, valid_unseen) into $ALFWORLD_DATA "
             "(default data/alfworld); needs network",
    )
    args = parser.parse_args(argv)
    if args.download:
        return download()
    try:
        games = make_fixture_games(args.make_fixtures)
    except ImportError as error:
        print(str(error), file=sys.stderr)
        return 1
    for game_file in games:
        game = _read_json(game_file)
        status = f"solvable, {len(game['walkthrough'])} steps" if game["solvable"] else "UNSOLVABLE"
        print(f"{game_file} ({status})")
    print(f"{len(games)} ALFWorld fixture games in {args.make_fixtures}")
    return 0 if games else 1


if __name__ == "__main__":
    sys.exit(main())

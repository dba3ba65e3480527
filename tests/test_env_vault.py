"""Tests for the built-in vault game (tempo_plugin.envs.vault) and the env registry."""

from __future__ import annotations

import dataclasses
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # the repository is not installed into the virtualenv
    sys.path.insert(0, _ROOT)

from tempo_plugin.envs import ENVS, Env, StepResult, VaultEnv, env_options, make  # noqa: E402
from tempo_plugin.envs.vault import PALETTE, VaultSnapshot  # noqa: E402

KEY_ROOM_RE = re.compile(
    r"^Key room\. A sign says the vault is (?P<correct>[a-z]+)\. "
    r"Keys: (?P<keys>[a-z]+(?:, [a-z]+)*)\. Actions: (?P<actions>.+)$"
)
TASK_RE = re.compile(r"^Take a key, walk north through (?P<length>\d+) halls and open the vault\.$")
ODD_ACTIONS = [
    "",
    " ",
    "\n\t",
    "__invalid__",
    "take",
    "take purple",
    "take the key",
    "open",
    "open vault now",
    "northwest",
    "ключ 🗝️",
    "north; open vault",
    "x" * 10_000,
    "\x00",
]


@dataclass(frozen=True)
class Parsed:
    """Game parameters read back from the reset observation and the task text."""

    length: int
    keys: tuple[str, ...]
    correct: str


def parse(env: VaultEnv, reset_text: str) -> Parsed:
    room = KEY_ROOM_RE.match(reset_text)
    task = TASK_RE.match(env.task)
    assert room is not None, reset_text
    assert task is not None, env.task
    return Parsed(int(task["length"]), tuple(room["keys"].split(", ")), room["correct"])


def hall(i: int, length: int, held: str) -> str:
    """Expected text of hall ``i``, built by hand from the brief's formats."""
    if i == length:
        return f"Hall {i} of {i}, the vault door. You hold the {held} key. Actions: open vault, south, wait"
    if i == 1:
        return f"Hall 1 of {length}. You hold the {held} key. Actions: north, wait"
    return f"Hall {i} of {length}. You hold the {held} key. Actions: north, south, wait"


def new_game(seed: int = 7) -> tuple[VaultEnv, Parsed]:
    env = VaultEnv()
    return env, parse(env, env.reset(seed))


def random_actions(rng: random.Random, count: int) -> list[str]:
    """A mix of admissible, oddly spelled and garbage actions chosen with ``rng``."""
    pool = ["north", "south", "wait", "open vault", "__invalid__", "", "NORTH ", "take red"]
    return [rng.choice(pool + [f"take {c}" for c in PALETTE]) for _ in range(count)]


def play(env: VaultEnv, actions: list[str]) -> list[StepResult]:
    """Apply ``actions`` until the episode ends; return the results."""
    results = []
    for action in actions:
        if results and results[-1].done:
            break
        results.append(env.step(action))
    return results


# ---------------------------------------------------------------------------- determinism


def test_reset_is_deterministic() -> None:
    a, b = VaultEnv(), VaultEnv()
    for seed in (0, 1, 7, 123, 2**40, -3):
        assert a.reset(seed) == b.reset(seed)
        assert a.task == b.task
        assert a.privileged_info() == b.privileged_info()
    # resetting again (also after other games) gives the same text
    first = a.reset(5)
    a.reset(6)
    assert a.reset(5) == first
    assert a.observation == first
    assert a.steps == 0


def test_replay_gives_identical_observations() -> None:
    rng = random.Random(42)
    for seed in range(20):
        a, b = VaultEnv(), VaultEnv()
        a.reset(seed)
        b.reset(seed)
        # take some key (maybe a wrong one), then wander with invalid actions mixed in
        actions = [f"take {rng.choice(a.game.keys)}", "__invalid__"] + random_actions(rng, 80)
        ra, rb = play(a, actions), play(b, actions)
        assert ra == rb
        assert a.snapshot() == b.snapshot()


# ---------------------------------------------------------------------------- playing


@pytest.mark.parametrize("seed", range(30))
def test_expert_wins_in_minimal_steps(seed: int) -> None:
    env, game = new_game(seed)
    assert env.minimal_steps == game.length + 1
    results = []
    while (action := env.expert_action()) is not None:
        assert action in env.admissible_actions()
        results.append(env.step(action))
    assert len(results) == game.length + 1
    assert [r.reward for r in results] == [0.0] * game.length + [1.0]
    assert [r.done for r in results] == [False] * game.length + [True]
    assert results[-1].won and not any(r.won for r in results[:-1])
    assert all(r.info == {"admissible": True} for r in results)
    assert results[-1].observation == f"The {game.correct} key turns and the vault opens. You win."
    assert env.steps == game.length + 1
    assert env.admissible_actions() == []
    assert env.privileged_info() == "The episode is over."


def test_wrong_key_loses() -> None:
    env, game = new_game(11)
    wrong = next(k for k in game.keys if k != game.correct)
    result = env.step(f"take {wrong}")
    assert result.observation == hall(1, game.length, wrong)
    assert env.privileged_info() == (
        f"The vault opens only with the {game.correct} key. "
        f"Plan: none, the {wrong} key cannot open the vault."
    )
    assert env.expert_action() is None
    for _ in range(game.length - 1):
        result = env.step("north")
        assert (result.reward, result.done, result.won) == (0.0, False, False)
    assert result.observation == hall(game.length, game.length, wrong)
    assert "Plan: none" in env.privileged_info()
    result = env.step("open vault")
    assert result.observation == f"The {wrong} key does not fit. The vault seals forever. You lose."
    assert (result.reward, result.done, result.won) == (0.0, True, False)
    assert env.observation == result.observation
    assert env.admissible_actions() == []
    assert env.expert_action() is None
    assert env.privileged_info() == "The episode is over."
    with pytest.raises(RuntimeError, match=r"step\(\) after the episode ended; call reset\(\)"):
        env.step("wait")
    # reset starts over
    assert env.reset(11).startswith("Key room.")
    assert not env.done


def test_exact_observation_strings() -> None:
    env, game = new_game(7)
    assert 8 <= game.length <= 14
    assert 2 <= len(game.keys) <= 4
    assert game.correct in game.keys
    takes = [f"take {k}" for k in game.keys]
    key_room = (
        f"Key room. A sign says the vault is {game.correct}. Keys: {', '.join(game.keys)}. "
        f"Actions: {', '.join(takes)}"
    )
    L, c = game.length, game.correct
    assert env.observation == key_room
    assert env.admissible_actions() == takes
    assert env.task == f"Take a key, walk north through {L} halls and open the vault."
    assert env.privileged_info() == (
        f"The vault opens only with the {c} key. Plan: take {c}, north x{L - 1}, open vault ({L + 1} steps)."
    )
    # hall-room actions do nothing in the key room
    assert env.step("wait").observation == "Nothing happens. " + key_room
    assert env.step("north").observation == "Nothing happens. " + key_room

    # take with odd spacing and case is canonicalised
    result = env.step(f"  Take   {c.upper()} ")
    assert result == StepResult(hall(1, L, c), 0.0, False, False, {"admissible": True})
    assert env.admissible_actions() == ["north", "wait"]
    assert env.privileged_info() == (
        f"The vault opens only with the {c} key. Plan: north x{L - 1}, open vault ({L} steps)."
    )
    # hall 1 has no south and the key room is locked; no other key can be taken
    assert env.step("south").observation == "Nothing happens. " + hall(1, L, c)
    for other in game.keys:
        result = env.step(f"take {other}")
        assert result.observation == "Nothing happens. " + hall(1, L, c)
        assert result.info == {"admissible": False}
    assert env.step("wait").observation == "Time passes. " + hall(1, L, c)
    assert env.step("north").observation == hall(2, L, c)
    assert env.admissible_actions() == ["north", "south", "wait"]
    assert env.expert_action() == "north"
    assert env.step("south").observation == hall(1, L, c)
    assert env.step("north").observation == hall(2, L, c)
    assert env.step("wait").observation == "Time passes. " + hall(2, L, c)
    assert env.step("open vault").observation == "Nothing happens. " + hall(2, L, c)
    for i in range(3, L + 1):
        assert env.step("NORTH").observation == hall(i, L, c)
    assert env.admissible_actions() == ["open vault", "south", "wait"]
    assert env.expert_action() == "open vault"
    assert env.privileged_info() == f"The vault opens only with the {c} key. Plan: open vault (1 step)."
    assert env.step("north").observation == "Nothing happens. " + hall(L, L, c)
    assert env.step("south").observation == hall(L - 1, L, c)
    assert env.privileged_info() == (
        f"The vault opens only with the {c} key. Plan: north x1, open vault (2 steps)."
    )
    env.step("north")
    result = env.step(" open  VAULT")
    assert result == StepResult(
        f"The {c} key turns and the vault opens. You win.", 1.0, True, True, {"admissible": True}
    )


@pytest.mark.parametrize("where", ["key room", "hall 1", "middle", "vault door"])
def test_invalid_actions_never_raise(where: str) -> None:
    env, game = new_game(3)
    if where != "key room":
        env.step(f"take {game.correct}")
    steps = {"key room": 0, "hall 1": 0, "middle": 4, "vault door": game.length - 1}[where]
    for _ in range(steps):
        env.step("north")
    room = env.observation
    before = env.snapshot()
    absent = next(c for c in PALETTE if c not in game.keys)
    for n, action in enumerate(ODD_ACTIONS + [f"take {absent}"], start=1):
        result = env.step(action)
        assert result == StepResult("Nothing happens. " + room, 0.0, False, False, {"admissible": False})
        assert env.steps == before.steps + n
        assert dataclasses.replace(env.snapshot(), steps=before.steps, observation=room) == before


def test_horizon_is_not_enforced_by_env() -> None:
    env, game = new_game(1)
    env.step(f"take {game.correct}")
    for _ in range(env.max_steps + 10):
        assert not env.step("wait").done
    assert env.steps == env.max_steps + 11
    assert env.expert_action() == "north"


def test_smallest_game() -> None:
    env = VaultEnv(max_steps=3, min_length=2, max_length=2)
    game = parse(env, env.reset(0))
    assert game.length == 2 and env.minimal_steps == 3
    assert env.step(f"take {game.correct}").observation == hall(1, 2, game.correct)
    assert env.step("north").observation == hall(2, 2, game.correct)
    assert env.step("south").observation == hall(1, 2, game.correct)
    env.step("north")
    assert env.step("open vault").won


# ---------------------------------------------------------------------------- snapshot/restore


def test_snapshot_restore_matches_original() -> None:
    a, game = new_game(21)
    a.step(f"take {game.correct}")
    for action in ["north", "wait", "__bad__", "north", "south", "north"]:
        a.step(action)
    snap = a.snapshot()
    assert isinstance(snap, VaultSnapshot)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.position = 0  # type: ignore[misc]
    assert hash(snap) == hash(a.snapshot())

    # A goes on; the snapshot does not change
    for action in ["north", "north", "wait"]:
        a.step(action)
    assert a.snapshot() != snap

    b = VaultEnv()  # never reset
    b.restore(snap)
    a.restore(snap)
    assert a.snapshot() == b.snapshot() == snap
    assert a.observation == b.observation == snap.observation
    assert a.task == b.task
    assert a.privileged_info() == b.privileged_info()
    assert a.admissible_actions() == b.admissible_actions()
    assert a.expert_action() == b.expert_action()
    actions = ["wait", "south", "nope", "north"] + ["north"] * game.length + ["open vault"]
    assert play(a, actions) == play(b, actions)
    assert a.done and b.done and a.won and b.won


def test_restore_into_env_holding_other_game() -> None:
    a, game = new_game(100)
    wrong = next(k for k in game.keys if k != game.correct)
    a.step(f"take {wrong}")
    a.step("north")
    snap = a.snapshot()
    reference = [a.step(x) for x in ["wait", "north", "x"]]

    other = VaultEnv()
    other.reset(101)
    assert other.game != a.game  # a different game
    other.step("take " + other.game.keys[0])
    other.restore(snap)
    assert other.game == a.game
    assert other.observation == snap.observation
    assert other.privileged_info().endswith(f"Plan: none, the {wrong} key cannot open the vault.")
    assert [other.step(x) for x in ["wait", "north", "x"]] == reference


def test_restore_terminal_and_initial_states() -> None:
    a, game = new_game(5)
    start = a.snapshot()
    while (action := a.expert_action()) is not None:
        a.step(action)
    end = a.snapshot()
    b = VaultEnv()
    b.restore(end)
    assert b.done and b.won and b.admissible_actions() == []
    with pytest.raises(RuntimeError):
        b.step("wait")
    b.restore(start)
    assert b.observation.startswith("Key room.")
    assert b.steps == 0 and b.expert_action() == f"take {game.correct}"


def test_restore_rejects_bad_snapshots() -> None:
    a, _ = new_game(5)
    snap = a.snapshot()
    with pytest.raises(ValueError, match="min_length"):
        VaultEnv(min_length=3, max_length=5, max_steps=6).restore(snap)
    with pytest.raises(TypeError):
        VaultEnv().restore("not a snapshot")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        VaultEnv().restore(dataclasses.replace(snap, position=99, held="red"))


# ---------------------------------------------------------------------------- errors, variety, registry


def test_methods_before_reset_raise() -> None:
    env = VaultEnv()
    for call in (
        lambda: env.task,
        lambda: env.observation,
        lambda: env.minimal_steps,
        lambda: env.step("wait"),
        env.admissible_actions,
        env.privileged_info,
        env.expert_action,
        env.snapshot,
    ):
        with pytest.raises(RuntimeError):
            call()


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"min_length": 1}, "min_length"),
        ({"min_length": 10, "max_length": 9}, "max_length"),
        ({"max_steps": 14}, "max_steps"),
        ({"max_steps": 10, "min_length": 2, "max_length": 10}, "max_steps"),
    ],
)
def test_constructor_validation(options: dict[str, int], name: str) -> None:
    with pytest.raises(ValueError, match=name) as info:
        VaultEnv(**options)
    assert "\n" not in str(info.value)


def test_constructor_accepts_edge_values() -> None:
    env = VaultEnv(max_steps=15)
    assert (env.max_steps, env.min_length, env.max_length) == (15, 8, 14)
    assert VaultEnv.supports_snapshot is True


def test_thousands_of_distinct_games() -> None:
    env = VaultEnv()
    games = set()
    for seed in range(5000):
        game = parse(env, env.reset(seed))
        assert 8 <= game.length <= 14
        assert 2 <= len(game.keys) <= 4 and len(set(game.keys)) == len(game.keys)
        assert set(game.keys) <= set(PALETTE) and game.correct in game.keys
        games.add(game)
    assert len(games) >= 2000
    assert {g.length for g in games} == set(range(8, 15))
    assert {len(g.keys) for g in games} == {2, 3, 4}


def test_registry_make() -> None:
    assert sorted(ENVS) == ["alfworld", "textworld", "vault", "vaults"]
    env = make("vault", max_steps=40)
    assert isinstance(env, VaultEnv) and env.max_steps == 40
    assert env.reset(0).startswith("Key room.")
    # after reset: on Python 3.11 the runtime protocol check reads the properties, which raise
    # RuntimeError before reset
    assert isinstance(env, Env)
    with pytest.raises(ValueError, match="--env") as info:
        make("nope")
    assert "'nope'" in str(info.value) and "vault" in str(info.value)
    with pytest.raises(ValueError, match="max_steps"):
        make("vault", max_steps=1)
    assert env_options("vault", 40) == {"max_steps": 40}
    assert env_options("textworld", 30, "games/") == {"max_steps": 30, "data_dir": "games/"}
    with pytest.raises(ValueError, match="--env-data"):
        env_options("vault", 40, "games/")


def test_winnable():
    env, game = new_game(11)
    assert env.winnable()
    env.step(f"take {game.correct}")
    assert env.winnable()
    while (action := env.expert_action()) is not None:
        env.step(action)
    assert env.won and not env.winnable()  # over, even though won
    env.reset(11)
    wrong = next(k for k in game.keys if k != game.correct)
    env.step(f"take {wrong}")
    assert not env.winnable() and not env.done
    with pytest.raises(RuntimeError):
        VaultEnv().winnable()

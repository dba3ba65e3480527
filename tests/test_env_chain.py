"""Tests for the chain of vaults (tempo_plugin.envs.chain, ``--env vaults``) and its registry entry."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from tempo_plugin.envs import BUILT_IN, ENVS, Env, StepResult, env_class, env_factory, env_options, make
from tempo_plugin.envs.chain import KEY_COLOURS, SIGNS, ChainSnapshot, VaultChainEnv
from tempo_plugin.envs.vault import VaultEnv

KEY_ROOM_RE = re.compile(
    r"^Key room (?P<number>\d) of (?P<count>\d)\. The sign shows a (?P<symbol>[a-z]+)\. "
    r"Keys: (?P<keys>[a-z]+(?:, [a-z]+)*)\. Actions: (?P<actions>.+)$"
)
ODD_ACTIONS = ["", " ", "\n\t", "__invalid__", "take", "take purple", "take the key", "open", "open vault now",
               "northwest", "ключ 🗝️", "north; open vault", "x" * 10_000, "\x00", None]
TASK = "Pass 3 vaults. In each key room take the key its sign calls for, walk north and open the vault."


def key_room(number: int, symbol: str, keys: list[str], count: int = 3) -> str:
    """Expected key-room text, written out from the format by hand."""
    takes = ", ".join(f"take {k}" for k in keys)
    return f"Key room {number} of {count}. The sign shows a {symbol}. Keys: {', '.join(keys)}. Actions: {takes}"


def hall(i: int, length: int, number: int, held: str) -> str:
    """Expected text of hall ``i`` of ``length`` before vault ``number``."""
    if i == length:
        return f"Hall {i} of {length} to vault {number}, at its door. You hold the {held} key. Actions: open vault, south, wait"
    actions = "north, wait" if i == 1 else "north, south, wait"
    return f"Hall {i} of {length} to vault {number}. You hold the {held} key. Actions: {actions}"


def play_expert(env: VaultChainEnv) -> list[StepResult]:
    results = []
    while (action := env.expert_action()) is not None:
        assert action in env.admissible_actions()
        results.append(env.step(action))
    return results


def pool_actions(rng: random.Random, count: int) -> list[str]:
    """Admissible, oddly spelled and garbage actions chosen with ``rng``."""
    pool = ["north", "south", "wait", "open vault", "__invalid__", "", " NORTH", "Open  Vault"]
    return [rng.choice(pool + [f"take {c}" for c in KEY_COLOURS]) for _ in range(count)]


def play(env: VaultChainEnv, actions: list[str]) -> list[StepResult]:
    results = []
    for action in actions:
        if env.done:
            break
        results.append(env.step(action))
    return results


# ------------------------------------------------------------------------------------ playing


@pytest.mark.parametrize("seed", range(40))
def test_expert_wins_in_minimal_steps(seed):
    env = VaultChainEnv()
    env.reset(seed)
    game = env.game
    assert game.minimal_steps == sum(v.length + 1 for v in game.vaults)
    results = play_expert(env)
    n = game.minimal_steps
    assert len(results) == n == env.steps
    assert [r.reward for r in results] == [0.0] * (n - 1) + [1.0]
    assert sum(r.reward for r in results) == 1.0
    assert [r.done for r in results] == [False] * (n - 1) + [True]
    assert results[-1].won and not any(r.won for r in results[:-1])
    assert all(r.info == {"admissible": True} for r in results)
    assert env.done and env.won and not env.winnable()
    assert env.admissible_actions() == [] and env.expert_action() is None


def test_sign_names_the_key_by_the_fixed_rule():
    env = VaultChainEnv()
    for seed in range(200):
        room = KEY_ROOM_RE.match(env.reset(seed))
        assert room is not None
        # the expert's first key is the colour SIGNS gives for the sign's symbol
        assert env.expert_action() == f"take {SIGNS[room['symbol']]}"
        assert SIGNS[room["symbol"]] in room["keys"].split(", ")


def test_exact_texts_and_plan_of_seed_0():
    env = VaultChainEnv()
    # game 0: vault 1 (3 halls, gold/silver/white, silver), vault 2 (3 halls, white/green/gold, gold),
    # vault 3 (2 halls, silver/gold/green, green); minimal steps 4 + 4 + 3 = 11
    assert env.reset(0) == key_room(1, "moon", ["gold", "silver", "white"])
    assert env.task == TASK
    assert env.game.minimal_steps == 11
    assert env.admissible_actions() == ["take gold", "take silver", "take white"]
    assert env.privileged_info() == (
        "Vault 1 opens only with the silver key. Plan: take silver, north x2, open vault, then 2 more vaults (11 steps)."
    )
    assert env.step("take silver") == StepResult(hall(1, 3, 1, "silver"), 0.0, False, False, {"admissible": True})
    assert env.privileged_info() == (
        "Vault 1 opens only with the silver key. Plan: north x2, open vault, then 2 more vaults (10 steps)."
    )
    assert env.step("north").observation == hall(2, 3, 1, "silver")
    assert env.privileged_info() == (
        "Vault 1 opens only with the silver key. Plan: north x1, open vault, then 2 more vaults (9 steps)."
    )
    # a detour south and back leaves the plan as it was
    assert env.step("south").observation == hall(1, 3, 1, "silver")
    assert env.step("NORTH ").observation == hall(2, 3, 1, "silver")
    assert env.step("wait").observation == "Time passes. " + hall(2, 3, 1, "silver")
    assert env.step("north").observation == hall(3, 3, 1, "silver")
    assert env.admissible_actions() == ["open vault", "south", "wait"]
    assert env.privileged_info() == "Vault 1 opens only with the silver key. Plan: open vault, then 2 more vaults (8 steps)."
    result = env.step("open vault")
    assert result == StepResult(
        "The silver key turns and vault 1 opens. " + key_room(2, "sun", ["white", "green", "gold"]),
        0.0, False, False, {"admissible": True},
    )
    assert (env.stage, env.position, env.held, env.vaults_left) == (1, 0, None, 2)
    assert env.privileged_info() == (
        "Vault 2 opens only with the gold key. Plan: take gold, north x2, open vault, then 1 more vault (7 steps)."
    )
    env.step("take gold")
    env.step("north")
    assert env.step("north").observation == hall(3, 3, 2, "gold")
    assert env.privileged_info() == "Vault 2 opens only with the gold key. Plan: open vault, then 1 more vault (4 steps)."
    assert env.step("open vault").observation == (
        "The gold key turns and vault 2 opens. " + key_room(3, "tree", ["silver", "gold", "green"])
    )
    assert env.privileged_info() == "Vault 3 opens only with the green key. Plan: take green, north x1, open vault (3 steps)."
    assert env.step("take green").observation == hall(1, 2, 3, "green")
    assert env.privileged_info() == "Vault 3 opens only with the green key. Plan: north x1, open vault (2 steps)."
    assert env.step("north").observation == hall(2, 2, 3, "green")
    assert env.privileged_info() == "Vault 3 opens only with the green key. Plan: open vault (1 step)."
    assert env.step(" open  VAULT") == StepResult(
        "The green key turns and vault 3 opens. You win.", 1.0, True, True, {"admissible": True}
    )
    assert env.privileged_info() == "The episode is over."
    assert env.observation == "The green key turns and vault 3 opens. You win."
    assert env.steps == 14  # 11 + the detour (south, north) + wait


def test_wrong_key_loses_at_the_door():
    env = VaultChainEnv()
    env.reset(0)
    for action in ["take silver", "north", "north", "open vault"]:
        env.step(action)
    assert env.winnable() and env.expert_action() == "take gold"
    # vault 2 opens only with gold; take white
    assert env.step("take white").observation == hall(1, 3, 2, "white")
    assert env.privileged_info() == "Vault 2 opens only with the gold key. Plan: none, the white key cannot open it."
    assert not env.winnable() and env.expert_action() is None
    for i in (2, 3):
        result = env.step("north")
        assert result == StepResult(hall(i, 3, 2, "white"), 0.0, False, False, {"admissible": True})
        assert env.privileged_info() == "Vault 2 opens only with the gold key. Plan: none, the white key cannot open it."
    result = env.step("open vault")
    assert result == StepResult("The white key does not fit. Vault 2 seals forever. You lose.", 0.0, True, False,
                                {"admissible": True})
    assert env.done and not env.won and not env.winnable()
    assert env.admissible_actions() == [] and env.expert_action() is None
    assert env.privileged_info() == "The episode is over."
    with pytest.raises(RuntimeError, match=r"step\(\) after the episode ended"):
        env.step("wait")
    # reset starts the same game over
    assert env.reset(0) == key_room(1, "moon", ["gold", "silver", "white"])
    assert env.winnable() and not env.done and env.steps == 0


@pytest.mark.parametrize("seed", range(20))
def test_any_wrong_first_key_loses_with_reward_zero(seed):
    env = VaultChainEnv()
    env.reset(seed)
    vault = env.game.vaults[0]
    for wrong in [k for k in vault.keys if k != vault.correct]:
        env.reset(seed)
        results = play(env, [f"take {wrong}"] + ["north"] * (vault.length - 1) + ["open vault"])
        assert len(results) == vault.length + 1
        assert [r.reward for r in results] == [0.0] * len(results)
        assert results[-1].done and not results[-1].won
        assert results[-1].observation == f"The {wrong} key does not fit. Vault 1 seals forever. You lose."


def test_winnable():
    env = VaultChainEnv()
    env.reset(0)
    assert env.winnable()
    env.step("take silver")
    assert env.winnable()
    env.reset(0)
    env.step("take gold")  # wrong for vault 1
    assert not env.winnable() and not env.done
    env.reset(0)
    play_expert(env)
    assert env.won and not env.winnable()


@pytest.mark.parametrize("where", ["key room 1", "hall 1", "middle hall", "door", "key room 2", "after wait"])
def test_inadmissible_actions_never_raise(where):
    env = VaultChainEnv()
    env.reset(0)  # vault 1 has 3 halls and keys gold, silver, white
    moves = {
        "key room 1": [], "hall 1": ["take silver"], "middle hall": ["take silver", "north"],
        "door": ["take silver", "north", "north"], "key room 2": ["take silver", "north", "north", "open vault"],
        "after wait": ["take silver", "north", "wait"],
    }[where]
    for action in moves:
        env.step(action)
    room = {
        "key room 1": key_room(1, "moon", ["gold", "silver", "white"]), "hall 1": hall(1, 3, 1, "silver"),
        "middle hall": hall(2, 3, 1, "silver"), "door": hall(3, 3, 1, "silver"),
        "key room 2": key_room(2, "sun", ["white", "green", "gold"]), "after wait": hall(2, 3, 1, "silver"),
    }[where]
    before = env.snapshot()
    # actions admissible elsewhere are inadmissible here; "take green" is never on offer in vault 1
    elsewhere = {"key room 1": ["north", "wait", "open vault", "take green"], "key room 2": ["north", "take silver"],
                 "hall 1": ["south", "take gold", "open vault"], "door": ["north", "take silver"]}
    for n, action in enumerate(ODD_ACTIONS + elsewhere.get(where, ["take silver", "open vault"]), start=1):
        result = env.step(action)
        assert result == StepResult("Nothing happens. " + room, 0.0, False, False, {"admissible": False})
        assert env.steps == before.steps + n
        assert dataclasses.replace(env.snapshot(), steps=before.steps, observation=before.observation) == before


def test_horizon_is_not_enforced_by_env():
    env = VaultChainEnv()
    env.reset(1)
    env.step(env.expert_action())
    for _ in range(env.max_steps + 5):
        assert not env.step("wait").done
    assert env.steps == env.max_steps + 6
    assert env.expert_action() == "north"


# ---------------------------------------------------------------------------- determinism


def test_same_seed_and_actions_give_same_observations():
    rng = random.Random(7)
    for seed in range(25):
        a, b = VaultChainEnv(), VaultChainEnv()
        assert a.reset(seed) == b.reset(seed)
        assert a.privileged_info() == b.privileged_info()
        actions = pool_actions(rng, 60)
        assert play(a, actions) == play(b, actions)
        assert a.snapshot() == b.snapshot()
        assert a.privileged_info() == b.privileged_info()
    # resetting again, also after another game, gives the same text
    env = VaultChainEnv()
    first = env.reset(5)
    env.reset(6)
    assert env.reset(5) == first


def test_games_vary_within_their_options():
    env = VaultChainEnv()
    games = set()
    for seed in range(2000):
        env.reset(seed)
        game = env.game
        assert len(game.vaults) == 3
        for vault in game.vaults:
            assert 2 <= vault.length <= 4
            assert 2 <= len(vault.keys) <= 4 and len(set(vault.keys)) == len(vault.keys)
            assert set(vault.keys) <= set(KEY_COLOURS) and vault.correct in vault.keys
        games.add(game.vaults)
    assert len(games) == 2000
    lengths = {v.length for g in games for v in g}
    assert lengths == {2, 3, 4}
    assert {len(v.keys) for g in games for v in g} == {2, 3, 4}
    assert {v.correct for g in games for v in g} == set(KEY_COLOURS)


def test_options_shape_the_game():
    env = VaultChainEnv(max_steps=12, vaults=2, min_length=5, max_length=5)
    text = env.reset(3)
    assert text.startswith("Key room 1 of 2.")
    assert env.task.startswith("Pass 2 vaults.")
    assert [v.length for v in env.game.vaults] == [5, 5]
    assert env.game.minimal_steps == 12
    assert len(play_expert(env)) == 12 and env.won


# ---------------------------------------------------------------------------- snapshot/restore


PREFIX = ["wait", "south", "nope", "north"]


def expert_actions(env: VaultChainEnv, count: int | None = None) -> list[str]:
    """The next ``count`` (default: all) expert actions from ``env``'s state; ``env`` is unchanged."""
    probe = VaultChainEnv(env.max_steps, *env.options)
    probe.restore(env.snapshot())
    actions = []
    while (count is None or len(actions) < count) and (action := probe.expert_action()) is not None:
        actions.append(action)
        probe.step(action)
    return actions


def continuation(snap: ChainSnapshot) -> list[str]:
    """PREFIX (odd moves) and then the expert's actions to the end, as played from ``snap``."""
    probe = VaultChainEnv()
    probe.restore(snap)
    play(probe, PREFIX)
    return PREFIX + expert_actions(probe)


def test_snapshot_restore_round_trip():
    a = VaultChainEnv()
    a.reset(21)
    for action in expert_actions(a, 6):
        a.step(action)
    snap = a.snapshot()
    assert isinstance(snap, ChainSnapshot)
    assert snap.steps == 6 and not snap.done
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.stage = 0  # type: ignore[misc]
    actions = continuation(snap)
    reference = play(a, actions)
    assert reference[-1].won and a.snapshot() != snap  # the snapshot did not move with the env

    b = VaultChainEnv()  # never reset
    b.restore(snap)
    c = VaultChainEnv()
    c.reset(999)  # holds another game, mid-episode
    c.step(c.expert_action())
    c.restore(snap)
    a.restore(snap)
    for env in (a, b, c):
        assert env.snapshot() == snap
        assert env.observation == snap.observation
        assert env.game.seed == 21
        assert env.privileged_info() == b.privileged_info()
        assert env.admissible_actions() == b.admissible_actions()
        assert env.expert_action() == b.expert_action()
    for env in (a, b, c):
        assert play(env, actions) == reference


def test_restore_terminal_and_initial_states():
    a = VaultChainEnv()
    a.reset(5)
    start = a.snapshot()
    play_expert(a)
    end = a.snapshot()
    b = VaultChainEnv()
    b.restore(end)
    assert b.done and b.won and b.admissible_actions() == []
    assert b.privileged_info() == "The episode is over."
    with pytest.raises(RuntimeError):
        b.step("wait")
    b.restore(start)
    assert b.steps == 0 and not b.done
    assert b.observation == start.observation and b.observation.startswith("Key room 1 of 3.")


def test_restore_rejects_other_options_and_impossible_states():
    a = VaultChainEnv()
    a.reset(0)  # vault 1: keys gold, silver, white, 3 halls
    a.step("take silver")
    snap = a.snapshot()
    with pytest.raises(ValueError, match="vaults, min_length, max_length"):
        VaultChainEnv(vaults=2).restore(snap)
    with pytest.raises(ValueError):
        VaultChainEnv(max_steps=30, max_length=5).restore(snap)
    impossible = [
        dict(stage=3),  # only stages 0..2
        dict(stage=-1),
        dict(position=4),  # vault 1 has 3 halls
        dict(position=-1, held=None),
        dict(position=0),  # in the key room holding a key
        dict(position=2, held=None),  # in a hall without a key
        dict(held="green"),  # not on offer in vault 1
    ]
    for change in impossible:
        env = VaultChainEnv()
        env.reset(8)
        before = env.snapshot()
        with pytest.raises(ValueError):
            env.restore(dataclasses.replace(snap, **change))
        assert env.snapshot() == before  # a rejected snapshot leaves the env as it was
    with pytest.raises(TypeError):
        VaultChainEnv().restore("not a snapshot")  # type: ignore[arg-type]
    vault = VaultEnv()
    vault.reset(0)
    with pytest.raises(TypeError):
        VaultChainEnv().restore(vault.snapshot())


# ---------------------------------------------------------------------------- constructor, registry


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"max_steps": 14}, "max_steps"),  # 3 x (4 + 1) = 15 needed
        ({"max_steps": 17, "max_length": 5}, "max_steps"),  # 3 x (5 + 1) = 18 needed
        ({"vaults": 0}, "vaults"),
        ({"min_length": 1}, "min_length"),
        ({"min_length": 4, "max_length": 3}, "max_length"),
        ({"max_steps": 29, "vaults": 6, "max_length": 4}, "max_steps"),  # 6 x 5 = 30 needed
    ],
)
def test_constructor_validation(options, name):
    with pytest.raises(ValueError, match=name) as info:
        VaultChainEnv(**options)
    assert "\n" not in str(info.value)


def test_constructor_edge_values_and_types():
    env = VaultChainEnv(max_steps=15)  # exactly 3 x (4 + 1)
    assert (env.max_steps, env.options) == (15, (3, 2, 4))
    assert VaultChainEnv(max_steps=18, max_length=5).options == (3, 2, 5)  # 3 x (5 + 1) = 18
    assert VaultChainEnv(max_steps=30, vaults=6).max_steps == 30  # 6 x (4 + 1) = 30
    assert VaultChainEnv().max_steps == 30
    assert VaultChainEnv.supports_snapshot is True
    for options in ({"max_steps": 30.0}, {"vaults": True}, {"min_length": "2"}):
        with pytest.raises(TypeError, match=next(iter(options))):
            VaultChainEnv(**options)


def test_methods_before_reset_raise():
    env = VaultChainEnv()
    for call in (lambda: env.task, lambda: env.observation, lambda: env.game, lambda: env.step("wait"),
                 env.admissible_actions, env.privileged_info, env.expert_action, env.snapshot, env.winnable):
        with pytest.raises(RuntimeError):
            call()


def test_registry():
    assert BUILT_IN == ("vaults", "vault")
    assert ENVS["vaults"] == "tempo_plugin.envs.chain:VaultChainEnv"
    assert env_class("vaults") is VaultChainEnv
    env = make("vaults", max_steps=30)
    assert isinstance(env, VaultChainEnv) and env.max_steps == 30 and env.options == (3, 2, 4)
    assert env.reset(0).startswith("Key room 1 of 3.")
    assert isinstance(env, Env)
    assert env_options("vaults", 30) == {"max_steps": 30, "vaults": 3}
    with pytest.raises(ValueError, match="--env-data") as info:
        env_options("vaults", 30, "x")
    assert "vaults" in str(info.value)
    with pytest.raises(ValueError, match="max_steps"):
        make("vaults", max_steps=10)
    built = env_factory("vaults", 30)()
    assert isinstance(built, VaultChainEnv) and built is not env


def test_vaults_flag_sets_the_chain_length_of_vaults_only():
    env = env_factory("vaults", 60, vaults=6)()
    env.reset(3)
    assert len(env.game.vaults) == 6 and "Key room 1 of 6" in env.observation
    assert env_options("vaults", 40, vaults=2) == {"max_steps": 40, "vaults": 2}
    assert env_options("vault", 40) == {"max_steps": 40}
    with pytest.raises(ValueError, match="--vaults is the chain length of --env vaults, not of vault"):
        env_options("vault", 40, vaults=4)

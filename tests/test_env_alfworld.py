"""ALFWorldEnv on the small hand-written fixture games (data/alfworld_fixtures)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.extras import import_extra

import_extra("alfworld", "alfworld")
import_extra("alfworld", "fast_downward")

from tempo_plugin.envs import alfworld as alf  # noqa: E402
from tempo_plugin.envs.alfworld import ALFWorldEnv, discover_games, make_fixture_games  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def games_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("alfworld_games")
    written = make_fixture_games(out)
    assert len(written) >= 2
    return out


@pytest.fixture(scope="session")
def env(games_dir) -> ALFWorldEnv:
    return ALFWorldEnv(str(games_dir), max_steps=40)


def _task_types(games_dir: Path) -> set[str]:
    return {json.loads((path.parent / "traj_data.json").read_text())["task_type"] for path in discover_games(games_dir)}


def test_fixture_games_are_solved_and_written(games_dir):
    games = discover_games(games_dir)
    assert len(games) >= 2
    assert {"pick_and_place_simple", "pick_clean_then_place_in_recep"} <= _task_types(games_dir)
    for path in games:
        game = json.loads(path.read_text())
        assert game["solvable"] is True and game["walkthrough"]
        assert "UNKNOWN GOAL" not in game["grammar"]
        assert set(game) >= {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}


def test_both_task_types_load(env):
    tasks = set()
    for seed in range(len(env.games)):
        obs = env.reset(seed)
        tasks.add(env.task)
        assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
        assert f"Your task is to: {env.task}." in obs
        assert obs.endswith(" Actions: " + ", ".join(env.admissible_actions()))
        assert "look" in env.admissible_actions()
        assert not env.done and not env.won and env.steps == 0
    assert {"put a mug in cabinet", "put a clean apple in fridge"} <= tasks
    assert env.reset(len(env.games)) == env.reset(0)  # games[seed % n]


def _play(env: ALFWorldEnv, seed: int, actions) -> list[str]:
    observations = [env.reset(seed)]
    for action in actions:
        observations.append(env.step(action).observation)
    return observations


def test_replay_gives_identical_observations(env):
    for seed in range(len(env.games)):
        env.reset(seed)
        actions = ["look", "inventory", "fly to the moon"] + list(env.walkthrough[:-1])
        first = _play(env, seed, actions)
        env.reset((seed + 1) % len(env.games))  # load the other game in between
        second = _play(env, seed, actions)
        assert first == second


def test_planning_does_not_change_the_game(env):
    env.reset(1)
    actions = ["go to microwave 1", "open microwave 1", "look"] + list(env.walkthrough)
    plain = _play(env, 1, actions)
    observed = [env.reset(1)]
    for action in actions:
        env.privileged_info()
        env.expert_action()
        observed.append(env.step(action).observation)
    assert observed == plain


def test_two_env_copies_restored_by_replay_agree(games_dir):
    first, second = ALFWorldEnv(str(games_dir)), ALFWorldEnv(str(games_dir))
    seed = 1
    first.reset(seed)
    history = list(first.walkthrough[:3])
    _play(first, seed, history)
    _play(second, seed, history)
    assert first.observation == second.observation
    assert first.privileged_info() == second.privileged_info()
    action = first.expert_action()
    assert action == second.expert_action()
    one, two = first.step(action), second.step(action)
    assert one == two


@pytest.mark.parametrize("seed", [0, 1])
def test_following_the_expert_wins(env, seed):
    env.reset(seed)
    assert env.privileged_info().startswith("Expert plan from here: ")
    total, steps = 0.0, 0
    while not env.done:
        action = env.expert_action()
        assert action in env.admissible_actions()
        result = env.step(action)
        total += result.reward
        steps += 1
        assert result.reward == (1.0 if result.done else 0.0)
    assert env.won and total == 1.0
    assert steps == len(env.walkthrough)
    assert env.privileged_info() == "The game is over."
    assert env.expert_action() is None and env.admissible_actions() == []
    with pytest.raises(RuntimeError):
        env.step("look")


def test_expert_replans_after_a_detour(env):
    env.reset(1)  # put a clean apple in fridge
    env.step("go to microwave 1")
    env.step("open microwave 1")
    plan = env.privileged_info()
    assert plan.startswith("Expert plan from here: go to countertop 1")
    while not env.done:
        env.step(env.expert_action())
    assert env.won


def test_invalid_action_gives_feedback_without_raising(env):
    obs = env.reset(0)
    actions = env.admissible_actions()
    for bad in ("fly to the moon", "", "take unicorn 1 from shelf 1"):
        result = env.step(bad)
        assert result.observation.startswith("Nothing happens. Actions: ")
        assert result.reward == 0.0 and not result.done and result.info["admissible"] is False
        assert env.admissible_actions() == actions
    assert env.steps == 3
    assert obs.split(" Actions: ")[1] == result.observation.split(" Actions: ")[1]
    result = env.step("  GO TO   Shelf 1 ")  # canonical form is admissible
    assert result.info["admissible"] is True and result.observation.startswith("You arrive at shelf 1.")


def test_step_budget_ends_the_episode(games_dir):
    env = ALFWorldEnv(str(games_dir), max_steps=3)
    env.reset(0)
    results = [env.step("look") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert not env.won and results[-1].reward == 0.0
    assert results[-1].observation.endswith("The game is over.")


def test_planted_divergence_is_detected(env, protocol):
    from tempo_plugin.rollout.engine import fresh_state
    from tempo_plugin.states.restore import RestoreError, restore_env

    start = fresh_state(env, 1, protocol)
    assert start.snapshot is None
    history = tuple(env.walkthrough[:4])
    for action in history:
        env.step(action)
    state = dataclasses.replace(start, action_history=history, observation=env.observation, privileged_info=env.privileged_info())
    other = ALFWorldEnv(str(env.data_dir))
    restore_env(other, state)
    assert other.observation == state.observation and other.privileged_info() == state.privileged_info

    altered = dataclasses.replace(state, observation=state.observation.replace("apple 1", "apple 2", 1))
    assert altered.observation != state.observation
    with pytest.raises(RestoreError):
        restore_env(other, altered)
    wrong_history = dataclasses.replace(state, action_history=history[:-1] + ("look",))
    with pytest.raises(RestoreError):
        restore_env(other, wrong_history)


def test_discovery_skips_unsolvable_unknown_and_sliced(games_dir, tmp_path):
    good = discover_games(games_dir)[0].parent
    traj = json.loads((good / "traj_data.json").read_text())
    game = json.loads((good / "game.tw-pddl").read_text())

    def plant(name: str, task_type: str, solvable) -> None:
        directory = tmp_path / name
        directory.mkdir(parents=True)
        (directory / "traj_data.json").write_text(json.dumps(dict(traj, task_type=task_type)))
        (directory / "game.tw-pddl").write_text(json.dumps(dict(game, solvable=solvable)))

    plant("train/ok", traj["task_type"], True)
    plant("train/unsolvable", traj["task_type"], False)
    plant("train/unchecked", traj["task_type"], None)
    plant("train/unknown_type", "pick_and_juggle", True)
    plant("train/pick_and_place_simple-Apple-Sliced-1", traj["task_type"], True)
    plant("train/movable_recep", traj["task_type"], True)
    (tmp_path / "train" / "no_game").mkdir()
    (tmp_path / "train" / "no_game" / "traj_data.json").write_text(json.dumps(traj))
    assert discover_games(tmp_path) == [tmp_path / "train" / "ok" / "game.tw-pddl"]
    assert discover_games(tmp_path / "missing") == []


def test_no_games_error_names_dir_and_commands(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(FileNotFoundError) as error:
        ALFWorldEnv(str(tmp_path))
    message = str(error.value)
    assert str(tmp_path) in message and "--download" in message and "--make-fixtures" in message
    assert "\n" not in message


def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    assert alf.resolve_data_dir(None) == REPO / "data" / "alfworld"
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert alf.resolve_data_dir(None) == tmp_path
    assert alf.resolve_data_dir("elsewhere") == Path("elsewhere")


def test_missing_packages_raise_import_error(monkeypatch, games_dir):
    monkeypatch.setitem(sys.modules, "fast_downward", None)
    with pytest.raises(ImportError, match=r"the alfworld environment needs: pip install -e \.\[alfworld\]"):
        ALFWorldEnv(str(games_dir))


def test_module_imports_without_the_packages():
    code = (
        "import sys; sys.modules['alfworld'] = None; sys.modules['textworld'] = None; "
        "import tempo_plugin.envs.alfworld as a; print(a.TASK_TYPES[0])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "pick_and_place_simple"


def test_cli_make_fixtures(tmp_path):
    out = tmp_path / "games"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-m", "tempo_plugin.envs.alfworld", "--make-fixtures", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "2 ALFWorld fixture games" in result.stdout
    assert len(discover_games(out)) == 2


def test_building_an_env_leaves_alfworld_data_unset(games_dir):
    """alfworld's import sets $ALFWORLD_DATA to ~/.cache/alfworld; a first env in a fresh process
    must not leave it set, or every later env would look for games there."""
    code = (
        "import os, sys\n"
        "from tempo_plugin.envs.alfworld import ALFWorldEnv\n"
        "ALFWorldEnv(data_dir=sys.argv[1])\n"
        "print(os.environ.get('ALFWORLD_DATA'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    out = subprocess.run([sys.executable, "-c", code, str(games_dir)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"

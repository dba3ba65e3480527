"""TextWorldEnv: determinism, exact snapshot/restore, expert plan, invalid actions, restore checks, CLI."""

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from tests.extras import import_extra

import_extra("textworld", "textworld")

from tempo_plugin.envs.textworld import TextWorldEnv, TextWorldSnapshot, make_games  # noqa: E402
from tempo_plugin.rollout.engine import fresh_state  # noqa: E402
from tempo_plugin.states.restore import RestoreError, restore_env  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def games_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("textworld_games")
    paths = make_games(directory, count=2, seed=0)
    assert len(paths) == 2 and all(p.is_file() and p.with_suffix(".json").is_file() for p in paths)
    return str(directory)


def _expert_run(env, seed, wrong_every=0):
    """Play the expert plan from reset(seed), with an invalid action every ``wrong_every`` steps."""
    env.reset(seed)
    results = []
    while not env.done:
        if wrong_every and len(results) % wrong_every == wrong_every - 1:
            results.append(env.step("dance wildly"))
        else:
            results.append(env.step(env.expert_action()))
    return results


def test_reset_observation_lists_actions(games_dir):
    env = TextWorldEnv(games_dir, max_steps=40)
    observation = env.reset(0)
    assert observation.endswith(" Actions: " + ", ".join(env.admissible_actions()))
    assert env.admissible_actions() == sorted(env.admissible_actions())
    assert "$$" not in observation and "TextWorld" in env.task
    assert env.privileged_info().startswith("Winning plan from here")
    assert env.expert_action() in env.admissible_actions()
    assert env.reset(2) == observation  # seed % number of games


def test_replay_gives_identical_observations(games_dir):
    a, b = TextWorldEnv(games_dir), TextWorldEnv(games_dir)
    for seed in (0, 1):
        a.reset(seed)
        plays, results = [], []
        while not a.done:
            plays.append(a.expert_action() if len(plays) % 3 != 2 else "dance wildly")
            results.append(a.step(plays[-1]))
        b.reset(seed)
        assert [b.step(x) for x in plays] == results
        b.reset(seed)
        assert [b.step(x).observation for x in plays] == [r.observation for r in results]


def test_expert_wins_with_total_reward_one(games_dir):
    env = TextWorldEnv(games_dir)
    for seed in (0, 1):
        results = _expert_run(env, seed)
        assert results[-1].won and results[-1].done
        assert sum(r.reward for r in results) == 1.0
        assert [r.reward for r in results[:-1]] == [0.0] * (len(results) - 1)
        assert env.privileged_info() == "The game is over."
        assert env.expert_action() is None and env.admissible_actions() == []
        assert "Actions:" not in env.observation
        with pytest.raises(RuntimeError):
            env.step("look")


def test_invalid_action_answers_and_costs_a_step(games_dir):
    env = TextWorldEnv(games_dir)
    before = env.reset(0)
    result = env.step("fly to the moon")
    assert result.info["admissible"] is False and result.reward == 0.0 and not result.done
    assert result.observation.startswith("That is not something you can do here.")
    assert result.observation.endswith(before[before.index(" Actions: "):])
    assert env.steps == 1
    assert env.step(None).info["admissible"] is False  # type: ignore[arg-type]
    assert env.step("  LOOK ").info["admissible"] is True  # canonicalised


def test_max_steps_ends_the_episode(games_dir):
    env = TextWorldEnv(games_dir, max_steps=3)
    env.reset(0)
    results = [env.step("look") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert not results[-1].won and results[-1].reward == 0.0
    assert env.expert_action() is None


@pytest.mark.parametrize("k", [0, 1, 2])
def test_snapshot_restore_into_fresh_env_continues_identically(games_dir, k):
    a = TextWorldEnv(games_dir)
    a.reset(1)
    for _ in range(k):
        a.step(a.expert_action())
    a.step("dance")
    snap = a.snapshot()
    for restored in (snap, pickle.loads(pickle.dumps(snap))):
        b = TextWorldEnv(games_dir)
        b.reset(0)  # another game loaded: restore must switch
        b.restore(restored)
        assert b.observation == a.observation and b.steps == a.steps
        assert b.privileged_info() == a.privileged_info()
        assert b.admissible_actions() == a.admissible_actions()
        action = a.expert_action()
        assert b.expert_action() == action
        a.restore(snap)
        assert a.step(action) == b.step(action)
        # and onwards to the end
        while not a.done:
            x = a.expert_action()
            assert a.step(x) == b.step(x)
        assert b.won
        a.restore(snap)


def test_restore_rewinds_same_env(games_dir):
    env = TextWorldEnv(games_dir)
    env.reset(0)
    env.step(env.expert_action())
    snap = env.snapshot()
    expected = [env.step(env.expert_action()) for _ in range(2)]
    env.restore(snap)
    assert [env.step(env.expert_action()) for _ in range(2)] == expected


def test_restore_rejects_foreign_snapshots(games_dir):
    env = TextWorldEnv(games_dir, max_steps=40)
    env.reset(0)
    with pytest.raises(TypeError):
        env.restore("not a snapshot")
    other = TextWorldEnv(games_dir, max_steps=10)
    other.reset(0)
    with pytest.raises(ValueError):
        env.restore(other.snapshot())
    bad = dataclasses.replace(env.snapshot(), trace=("eating the moon",))
    with pytest.raises(ValueError):
        env.restore(bad)


def _state_after(env, protocol, seed, actions):
    start = fresh_state(env, seed, protocol)
    for action in actions:
        env.step(action)
    return dataclasses.replace(
        start,
        action_history=tuple(actions),
        observation=env.observation,
        privileged_info=env.privileged_info(),
        round_index=len(actions),
        snapshot=env.snapshot(),
    )


def test_restore_env_detects_planted_divergence(games_dir, protocol):
    env = TextWorldEnv(games_dir)
    env.reset(1)
    actions = []
    for _ in range(2):
        actions.append(env.expert_action())
        env.step(actions[-1])
    actions.append("dance")
    state = _state_after(env, protocol, 1, actions)
    assert isinstance(state.snapshot, TextWorldSnapshot)

    fresh = TextWorldEnv(games_dir)
    restore_env(fresh, state, "auto")  # snapshot
    assert fresh.observation == state.observation
    fresh2 = TextWorldEnv(games_dir)
    restore_env(fresh2, state, "replay")
    assert fresh2.observation == state.observation

    altered = dataclasses.replace(state, observation=state.observation.replace("Actions:", "Actions :"))
    with pytest.raises(RestoreError):
        restore_env(TextWorldEnv(games_dir), altered, "replay")
    diverged = dataclasses.replace(state, action_history=state.action_history[:-2] + ("look", "dance"))
    with pytest.raises(RestoreError):
        restore_env(TextWorldEnv(games_dir), diverged, "replay")


def test_missing_games_is_a_one_line_error(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        TextWorldEnv(str(tmp_path / "none"))
    message = str(error.value)
    assert "\n" not in message and "--make-games" in message and "none" in message


def test_cli_make_games(tmp_path):
    out = tmp_path / "cli_games"
    done = subprocess.run(
        [sys.executable, "-m", "tempo_plugin.envs.textworld", "--make-games", str(out), "--count", "1", "--seed", "3",
         "--eval-count", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for split in ("train", "eval"):  # training games and held-out games (tests/test_heldout_splits.py)
        assert (out / split / "game_00000.z8").is_file() and (out / split / "game_00000.json").is_file()
    env = TextWorldEnv(str(out))
    assert "Actions: " in env.reset(0)
    bad = subprocess.run(
        [sys.executable, "-m", "tempo_plugin.envs.textworld", "--make-games", str(out), "--count", "-1"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0

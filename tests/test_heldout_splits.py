"""Held-out evaluation games are really held out: ALFWorld's evaluation plays valid_unseen (or
valid_seen on request) and training plays train; TextWorld's evaluation plays <games>/eval and
training <games>/train; a missing evaluation folder stops with one line naming it and the command
that makes it (envs.eval_env_factory, the trainer, eval/ and the slime data source)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.extras import import_extra

from tempo_plugin.envs import (
    DEFAULT_EVAL_SPLIT,
    env_factory,
    env_options,
    eval_env_factory,
    held_out_split,
)
from tempo_plugin.rollout.games import eval_games, train_game

REPO = Path(__file__).resolve().parents[1]
EVAL_SEEDS = eval_games(8)
TRAIN_SEEDS = [train_game(seed, cursor) for seed in (0, 1) for cursor in range(4)]


def played(make_env, seeds) -> list[Path]:
    """The game file each seed plays on one env of ``make_env``."""
    env = make_env()
    files = []
    for seed in seeds:
        env.reset(seed)
        files.append(Path(env.game_file))
    return files


def contents(paths) -> set[bytes]:
    return {Path(p).read_bytes() for p in paths}


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message
    return message


# -- the registry -----------------------------------------------------------------------------------


def test_held_out_split_per_environment():
    assert held_out_split("vaults") == "" and held_out_split("vault") == ""
    assert held_out_split("alfworld") == "valid_unseen" == DEFAULT_EVAL_SPLIT
    assert held_out_split("alfworld", "valid_seen") == "valid_seen"
    assert held_out_split("textworld") == "eval"
    for name in ("textworld", "vaults"):
        with pytest.raises(ValueError, match="--eval-split valid_seen"):
            held_out_split(name, "valid_seen")
    # the training options are unchanged: no split, so training plays the train split
    assert env_options("textworld", 30, "games/") == {"max_steps": 30, "data_dir": "games/"}


def test_built_in_games_evaluate_on_the_same_environment():
    """The vault games' held-out games are seeds training never reaches: the same environment."""
    train_env, eval_env = env_factory("vaults", 30, vaults=2)(), eval_env_factory("vaults", 30, vaults=2)()
    assert type(train_env) is type(eval_env)
    for seed in EVAL_SEEDS[:3]:
        assert train_env.reset(seed) == eval_env.reset(seed)
    assert max(TRAIN_SEEDS) < min(EVAL_SEEDS)


# -- ALFWorld -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def alfworld_games(tmp_path_factory) -> list[Path]:
    """The two fixture games (game.tw-pddl files), assembled once."""
    import_extra("alfworld", "alfworld")
    import_extra("alfworld", "fast_downward")
    from tempo_plugin.envs.alfworld import make_fixture_games

    games = make_fixture_games(tmp_path_factory.mktemp("alfworld_fixture_games"))
    assert len(games) == 2
    return games


def alfworld_root(base: Path, games: list[Path], splits=("train", "valid_seen", "valid_unseen"),
                  official: bool = True) -> Path:
    """A data root: train holds the first fixture game, valid_unseen and valid_seen the second
    (under names of their own). ``official``: the splits under json_2.1.1, as the download writes them."""
    root = base / "alfworld"
    splits_dir = root / "json_2.1.1" if official else root
    for split in splits:
        game = games[0] if split == "train" else games[1]
        shutil.copytree(game.parent, splits_dir / split / f"{game.parent.name}-{split}")
    return root


@pytest.mark.parametrize("official", [True, False], ids=["json_2.1.1", "splits-at-root"])
def test_alfworld_evaluation_plays_no_training_game(alfworld_games, tmp_path, official):
    root = alfworld_root(tmp_path, alfworld_games, official=official)
    splits = root / "json_2.1.1" if official else root
    train = played(env_factory("alfworld", 10, str(root)), TRAIN_SEEDS)
    held_out = played(eval_env_factory("alfworld", 10, str(root)), EVAL_SEEDS)
    assert all(splits / "train" in p.parents for p in train)
    assert all(splits / "valid_unseen" in p.parents for p in held_out)
    # compare the game files themselves: no held-out game is a training game
    assert contents(held_out).isdisjoint(contents(train))
    assert contents(held_out).isdisjoint(contents((splits / "train").rglob("game.tw-pddl")))


def test_alfworld_training_plays_the_train_split_only(alfworld_games, tmp_path, monkeypatch):
    """A data root used to be walked whole, so training played the validation games too."""
    root = alfworld_root(tmp_path, alfworld_games)
    env = env_factory("alfworld", 10, str(root))()
    assert env.data_dir == root / "json_2.1.1" / "train"
    assert len(env.games) == 1 and "valid" not in str(env.games[0])
    monkeypatch.setenv("ALFWORLD_DATA", str(root))  # the same through $ALFWORLD_DATA
    assert env_factory("alfworld", 10)().data_dir == root / "json_2.1.1" / "train"
    assert eval_env_factory("alfworld", 10)().data_dir == root / "json_2.1.1" / "valid_unseen"


def test_alfworld_valid_seen_on_request(alfworld_games, tmp_path):
    root = alfworld_root(tmp_path, alfworld_games)
    seen = played(eval_env_factory("alfworld", 10, str(root), eval_split="valid_seen"), EVAL_SEEDS)
    assert all(root / "json_2.1.1" / "valid_seen" in p.parents for p in seen)
    assert contents(seen).isdisjoint(contents(played(env_factory("alfworld", 10, str(root)), TRAIN_SEEDS)))


@pytest.mark.parametrize("empty", [False, True], ids=["missing", "empty"])
def test_alfworld_missing_eval_split_is_one_line_naming_folder_and_command(alfworld_games, tmp_path, empty):
    root = alfworld_root(tmp_path, alfworld_games, splits=("train",))
    if empty:
        (root / "json_2.1.1" / "valid_unseen").mkdir()
    env_factory("alfworld", 10, str(root))  # training still works
    with pytest.raises(FileNotFoundError) as error:
        eval_env_factory("alfworld", 10, str(root))
    message = one_line(error.value)
    assert str(root / "json_2.1.1" / "valid_unseen") in message
    assert "python -m tempo_plugin.envs.alfworld --download" in message


def test_alfworld_one_split_folder(alfworld_games, tmp_path):
    """--env-data at a split folder: training plays it, evaluation its sibling held-out split, and
    the evaluation split itself is refused."""
    splits = alfworld_root(tmp_path, alfworld_games) / "json_2.1.1"
    assert env_factory("alfworld", 10, str(splits / "train"))().data_dir == splits / "train"
    assert eval_env_factory("alfworld", 10, str(splits / "train"))().data_dir == splits / "valid_unseen"
    assert eval_env_factory("alfworld", 10, str(splits / "train"), eval_split="valid_seen")().data_dir \
        == splits / "valid_seen"
    with pytest.raises(ValueError) as error:
        eval_env_factory("alfworld", 10, str(splits / "valid_unseen"))
    assert str(splits / "valid_unseen") in one_line(error.value)


def test_alfworld_flat_fixture_folder_trains_but_does_not_evaluate(alfworld_games):
    folder = alfworld_games[0].parent.parent
    assert len(env_factory("alfworld", 10, str(folder))().games) == 2  # as before: every game under it
    with pytest.raises(FileNotFoundError) as error:
        eval_env_factory("alfworld", 10, str(folder))
    message = one_line(error.value)
    assert str(folder / "valid_unseen") in message and "--download" in message and "--eval-games 0" in message


# -- TextWorld ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def textworld_layout(tmp_path_factory) -> Path:
    """<dir>/train (2 games) and <dir>/eval (2 held-out games), made once."""
    import_extra("textworld", "textworld")
    from tempo_plugin.envs.textworld import make_layout

    root = tmp_path_factory.mktemp("textworld_layout")
    train, held_out = make_layout(root, count=2, seed=0, eval_count=2)
    assert [p.parent for p in train] == [root / "train"] * 2 and [p.parent for p in held_out] == [root / "eval"] * 2
    return root


def test_textworld_seed_streams_are_disjoint():
    from tempo_plugin.envs.textworld import _game_seed

    for seed in range(3):
        for index in range(50):
            assert 1 <= _game_seed(seed, index, 0, "train") < 2**31 <= _game_seed(seed, index, 0, "eval") < 2**32


def test_textworld_evaluation_plays_no_training_game(textworld_layout):
    train = played(env_factory("textworld", 10, str(textworld_layout)), TRAIN_SEEDS)
    held_out = played(eval_env_factory("textworld", 10, str(textworld_layout)), EVAL_SEEDS)
    assert {p.parent for p in train} == {(textworld_layout / "train").resolve()}
    assert {p.parent for p in held_out} == {(textworld_layout / "eval").resolve()}
    assert len(set(held_out)) == 2  # both held-out games are played
    for suffix in (".z8", ".json"):
        assert contents(p.with_suffix(suffix) for p in held_out).isdisjoint(
            contents((textworld_layout / "train").glob(f"*{suffix}")))


def test_textworld_train_folder_given_evaluates_on_its_sibling(textworld_layout):
    train_dir = textworld_layout / "train"
    assert env_factory("textworld", 10, str(train_dir))().data_dir == train_dir
    assert eval_env_factory("textworld", 10, str(train_dir))().data_dir == textworld_layout / "eval"
    with pytest.raises(ValueError) as error:
        env_factory("textworld", 10, str(textworld_layout / "eval"))
    assert str(textworld_layout / "eval") in one_line(error.value)


def test_textworld_missing_eval_folder_is_one_line_naming_folder_and_command(textworld_layout, tmp_path):
    root = tmp_path / "games"
    shutil.copytree(textworld_layout / "train", root / "train")
    env_factory("textworld", 10, str(root))  # training still works
    for _ in ("missing", "empty"):
        with pytest.raises(FileNotFoundError) as error:
            eval_env_factory("textworld", 10, str(root))
        message = one_line(error.value)
        assert str(root / "eval") in message
        assert f"python -m tempo_plugin.envs.textworld --make-games {root} --count 0 --eval-count" in message
        (root / "eval").mkdir(exist_ok=True)


def test_textworld_flat_folder_trains_and_gets_an_eval_folder(textworld_layout, tmp_path):
    """A game folder made before the layout: training plays its games; evaluation needs <dir>/eval,
    which the make-games command adds without touching the training games."""
    from tempo_plugin.envs.textworld import make_layout

    flat = tmp_path / "flat"
    shutil.copytree(textworld_layout / "train", flat)
    assert len(env_factory("textworld", 10, str(flat))().games) == 2
    with pytest.raises(FileNotFoundError) as error:
        eval_env_factory("textworld", 10, str(flat))
    assert str(flat / "eval") in one_line(error.value)
    make_layout(flat, count=0, seed=0, eval_count=1)
    train = played(env_factory("textworld", 10, str(flat)), TRAIN_SEEDS)
    held_out = played(eval_env_factory("textworld", 10, str(flat)), EVAL_SEEDS)
    assert {p.parent for p in train} == {flat.resolve()} and {p.parent for p in held_out} == {(flat / "eval").resolve()}
    assert contents(held_out).isdisjoint(contents(train))


def test_textworld_cli_makes_the_layout(tmp_path):
    import_extra("textworld", "textworld")
    out = tmp_path / "cli"
    command = [sys.executable, "-m", "tempo_plugin.envs.textworld", "--make-games", str(out)]
    done = subprocess.run(command + ["--count", "1", "--eval-count", "1", "--seed", "3"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for split in ("train", "eval"):
        assert (out / split / "game_00000.z8").is_file() and (out / split / "game_00000.json").is_file()
    assert (out / "train" / "game_00000.z8").read_bytes() != (out / "eval" / "game_00000.z8").read_bytes()
    bad = subprocess.run(command + ["--count", "0", "--eval-count", "0"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0 and "nothing to make" in bad.stderr


# -- the runs that evaluate ------------------------------------------------------------------------------


def test_trainer_stops_with_one_line_when_the_eval_folder_is_missing(textworld_layout, alfworld_games, tmp_path,
                                                                      capsys):
    from tempo_plugin.train import main

    games = tmp_path / "games"
    shutil.copytree(textworld_layout / "train", games / "train")
    alfworld = alfworld_root(tmp_path, alfworld_games, splits=("train",))
    cases = [(["--env", "textworld", "--env-data", str(games)], games / "eval", "--make-games"),
             (["--env", "alfworld", "--env-data", str(alfworld)],
              alfworld / "json_2.1.1" / "valid_unseen", "--download"),
             (["--env", "alfworld", "--env-data", str(alfworld), "--eval-split", "valid_seen"],
              alfworld / "json_2.1.1" / "valid_seen", "--download")]
    for index, (flags, folder, command) in enumerate(cases):
        assert main(flags + ["--out", str(tmp_path / f"run{index}"), "--cache-dir", str(tmp_path / "cache")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(folder) in err and command in err
    # --eval-games 0 measures nothing, so it needs no held-out folder (stopped later, by a bad --model)
    flags = ["--env", "textworld", "--env-data", str(games), "--eval-games", "0", "--model", str(tmp_path / "nowhere")]
    assert main(flags + ["--out", str(tmp_path / "run-no-eval")]) == 2
    assert str(games / "eval") not in capsys.readouterr().err


def test_trainer_evaluation_plays_the_held_out_folder(textworld_layout, tmp_path, monkeypatch):
    """A short textworld run (tiny model): every reset of the before/after evaluation plays a game
    of <games>/eval, every training reset a game of <games>/train."""
    from tempo_plugin.envs.textworld import TextWorldEnv
    from tempo_plugin.metrics import read_metrics
    from tempo_plugin.train import main

    resets: list[tuple[str, Path]] = []
    reset = TextWorldEnv.reset

    def recording_reset(self, seed):
        observation = reset(self, seed)
        resets.append((self.split, Path(self.game_file)))
        return observation

    monkeypatch.setattr(TextWorldEnv, "reset", recording_reset)
    out = tmp_path / "run"
    args = ["--env", "textworld", "--env-data", str(textworld_layout), "--bootstrap-steps", "1",
            "--warmup-updates", "1", "--warmup-games-per-batch", "1", "--td-updates", "0", "--branches", "2",
            "--critic-samples", "2", "--endpoint-samples", "1", "--states-per-batch", "1", "--eval-games", "2",
            "--max-episode-steps", "3", "--macro-rounds", "3", "--max-assistant-tokens", "8",
            "--critic-max-tokens", "8", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert main(args) == 0
    assert [r["phase"] for r in read_metrics(out / "metrics.jsonl")] == ["eval", "warmup", "eval"]
    held_out = [path for split, path in resets if split == "eval"]
    trained = [path for split, path in resets if split == "train"]
    assert held_out and trained
    assert {p.parent for p in held_out} == {(textworld_layout / "eval").resolve()}
    assert {p.parent for p in trained} == {(textworld_layout / "train").resolve()}


def test_eval_benchmark_plays_the_held_out_folder_or_skips(textworld_layout, tmp_path, monkeypatch):
    import eval.benchmarks as benchmarks
    from tempo_plugin.config import TempoConfig

    factories = []
    monkeypatch.setattr(benchmarks, "episode_successes",
                        lambda policy, cfg, make_env, games, episodes, *rest: factories.append((make_env, games)) or
                        [1] * len(games))
    settings = benchmarks.Settings(k=1, samples=1)
    cfg = TempoConfig(env="textworld", env_data=str(textworld_layout))
    policy = benchmarks.Policy(sampler=None, protocol=None, config=cfg)
    result = benchmarks.AgentBenchmark("textworld", 4).run(policy, settings)
    assert result.skipped is None and result.info["split"] == "eval"
    for make_env, games in factories:
        assert games == eval_games(4)
        assert {p.parent for p in played(make_env, games)} == {(textworld_layout / "eval").resolve()}

    games = tmp_path / "games"
    shutil.copytree(textworld_layout / "train", games / "train")
    policy.config = TempoConfig(env="textworld", env_data=str(games))
    skipped = benchmarks.AgentBenchmark("textworld", 4).run(policy, settings).skipped
    assert skipped and "\n" not in skipped and str(games / "eval") in skipped and "--make-games" in skipped


def test_eval_benchmark_uses_the_runs_alfworld_split(alfworld_games, tmp_path, monkeypatch):
    import eval.benchmarks as benchmarks
    from tempo_plugin.config import TempoConfig

    root = alfworld_root(tmp_path, alfworld_games)
    folders = []
    monkeypatch.setattr(benchmarks, "episode_successes",
                        lambda policy, cfg, make_env, games, *rest: folders.append(make_env().data_dir) or [0] * len(games))
    settings = benchmarks.Settings(k=1, samples=1)
    for split in ("valid_unseen", "valid_seen"):
        cfg = TempoConfig(env="alfworld", env_data=str(root), eval_split=split)
        result = benchmarks.AgentBenchmark("alfworld", 2).run(benchmarks.Policy(None, None, cfg), settings)
        assert result.info["split"] == split
        assert set(folders) == {root / "json_2.1.1" / split}
        folders.clear()


def test_slime_data_source_checks_the_held_out_folder_at_start(textworld_layout, tmp_path):
    """With slime's --eval-interval, a missing held-out folder fails when the data source starts;
    the evaluation plays the held-out folder."""
    import yaml

    from tempo_plugin.slime.data_source import TempoDataSource
    from tempo_plugin.config import ConfigError

    games = tmp_path / "games"
    shutil.copytree(textworld_layout / "train", games / "train")

    def args(env_data: Path, **overrides) -> SimpleNamespace:
        config = tmp_path / "tempo.yaml"
        config.write_text(yaml.safe_dump({"env": "textworld", "env_data": str(env_data), "eval_games": 2,
                                          "max_episode_steps": 10, "warmup_updates": 1}))
        values = dict(custom_config_path=str(config), rollout_batch_size=2, n_samples_per_prompt=2,
                      rollout_temperature=1.0, rollout_top_p=1.0, seed=0, num_rollout=3, global_batch_size=None,
                      rollout_function_path="tempo_plugin.slime.rollout.generate_rollout",
                      eval_interval=20)
        values.update(overrides)
        return SimpleNamespace(**values)

    with pytest.raises(ConfigError) as error:
        TempoDataSource(args(games))
    message = one_line(error.value)
    assert str(games / "eval") in message and "--make-games" in message
    TempoDataSource(args(games, eval_interval=None))  # no evaluation asked for: nothing to check
    source = TempoDataSource(args(textworld_layout))
    source._rollout = SimpleNamespace(sampler=None, protocol=None)  # the HTTP sampler needs a router
    rollout = source.eval_rollout()
    assert {p.parent for p in played(rollout.make_env, EVAL_SEEDS)} == {(textworld_layout / "eval").resolve()}


def test_data_readme_describes_the_layout():
    text = (REPO / "data" / "README.md").read_text()
    for words in ("valid_unseen", "valid_seen", "--eval-split", "train/", "eval/", "--eval-count"):
        assert words in text, words
    assert os.path.exists(REPO / "data" / "alfworld_fixtures")


def test_eval_cli_split_option_picks_alfworlds_split_only(alfworld_games, tmp_path, monkeypatch):
    """eval.sh --eval-split valid_seen: ALFWorld plays valid_seen; the other environments are unchanged."""
    import eval.benchmarks as benchmarks
    from eval.cli import build_parser
    from tempo_plugin.config import TempoConfig

    assert build_parser().parse_args(["x", "--eval-split", "valid_seen"]).eval_split == "valid_seen"
    root = alfworld_root(tmp_path, alfworld_games)
    folders = []
    monkeypatch.setattr(benchmarks, "episode_successes",
                        lambda policy, cfg, make_env, games, *rest: folders.append(make_env()) or [0] * len(games))
    settings = benchmarks.Settings(k=1, samples=1, eval_split="valid_seen")
    cfg = TempoConfig(env="alfworld", env_data=str(root))  # the run's own split: valid_unseen
    assert benchmarks.AgentBenchmark("alfworld", 2).run(benchmarks.Policy(None, None, cfg), settings).info["split"] \
        == "valid_seen"
    assert {env.data_dir for env in folders} == {root / "json_2.1.1" / "valid_seen"}
    vault = benchmarks.AgentBenchmark("vault", 2).run(benchmarks.Policy(None, None, cfg), settings)
    assert vault.skipped is None and "split" not in vault.info

"""Tests for the TEMPO configuration, its validation and its CLI."""

from __future__ import annotations

import dataclasses

import pytest

from tempo_plugin.config import ConfigError, TempoConfig, build_parser, parse_config

POSITIVE_INTS = [
    "macro_rounds", "branches", "critic_samples", "endpoint_samples", "states_per_batch",
    "warmup_games_per_batch", "state_store_capacity", "max_episode_steps", "max_trajectory_tokens",
    "max_assistant_tokens", "critic_max_tokens", "train_tokens_per_micro_batch", "save_every",
]
NON_NEGATIVE_INTS = [
    "warmup_updates", "td_updates", "mc_refresh_every", "bootstrap_steps", "eval_games", "eval_every",
    "max_state_uses", "max_env_steps",
]


def kebab(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_defaults_validate():
    cfg = TempoConfig()
    assert cfg.validate() is cfg
    assert parse_config([]) == cfg
    # defaults: T = 30 is a multiple of H = 5
    assert (cfg.max_episode_steps, cfg.macro_rounds) == (30, 5)
    assert cfg.total_updates == cfg.warmup_updates + cfg.td_updates


def test_parsed_values_have_field_types():
    cfg = parse_config(["--macro-rounds", "3", "--r-max", "2", "--restore", "replay", "--out", "x"])
    assert cfg.macro_rounds == 3 and isinstance(cfg.macro_rounds, int)  # not the default 5
    assert cfg.r_max == 2.0 and isinstance(cfg.r_max, float)
    assert cfg.restore == "replay"
    assert cfg.out == "x"


def test_horizon_must_divide_episode_length():
    with pytest.raises(ConfigError) as info:
        parse_config(["--macro-rounds", "7"])  # 30 % 7 = 2
    assert "--max-episode-steps" in str(info.value)
    assert "--macro-rounds" in str(info.value)
    assert parse_config(["--macro-rounds", "6"]).macro_rounds == 6  # 30 % 6 = 0


@pytest.mark.parametrize("name", POSITIVE_INTS)
@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_ints_name_their_flag(name, value):
    with pytest.raises(ConfigError, match=kebab(name)):
        parse_config([f"{kebab(name)}={value}"])


@pytest.mark.parametrize("name", NON_NEGATIVE_INTS)
def test_negative_counts_name_their_flag(name):
    with pytest.raises(ConfigError, match=kebab(name)):
        parse_config([f"{kebab(name)}=-1"])


@pytest.mark.parametrize(
    "flag_value",
    [
        ("--r-max", "0"), ("--r-max", "-1"), ("--temperature", "0"), ("--learning-rate", "-0.001"),
        ("--top-p", "0"), ("--top-p", "1.5"), ("--eps-clip", "-0.1"), ("--eps-clip-high", "-0.1"),
        ("--weight-decay", "-1"), ("--grad-clip", "-1"), ("--critic-advantage-std", "-0.5"), ("--critic-advantage-std", "nan"),
    ],
)
def test_invalid_floats_name_their_flag(flag_value):
    flag, value = flag_value
    with pytest.raises(ConfigError, match=flag):
        parse_config([f"{flag}={value}"])


def test_cross_field_checks_name_their_flags():
    with pytest.raises(ConfigError, match="--branches"):
        parse_config(["--branches", "1"])  # td_updates defaults to 8 > 0
    assert parse_config(["--branches", "1", "--td-updates", "0"]).branches == 1
    with pytest.raises(ConfigError, match="--critic-samples"):
        parse_config(["--critic-samples", "1"])
    with pytest.raises(ConfigError) as info:
        parse_config(["--warmup-updates", "0", "--td-updates", "0"])
    assert "--warmup-updates" in str(info.value) and "--td-updates" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_config(["--max-assistant-tokens", "64", "--max-trajectory-tokens", "64"])
    assert "--max-assistant-tokens" in str(info.value) and "--max-trajectory-tokens" in str(info.value)
    with pytest.raises(ConfigError, match="--device"):
        TempoConfig(device="tpu").validate()
    with pytest.raises(ConfigError, match="--restore"):
        TempoConfig(restore="magic").validate()


def test_every_field_has_a_kebab_case_flag():
    parser = build_parser()
    by_dest = {action.dest: action for action in parser._actions}
    for f in dataclasses.fields(TempoConfig):
        assert f.name in by_dest, f.name
        action = by_dest[f.name]
        assert action.option_strings == [kebab(f.name)]
        assert action.default == f.default
    # and nothing else but -h
    assert set(by_dest) - {f.name for f in dataclasses.fields(TempoConfig)} == {"help"}


def test_resume_flag():
    assert parse_config([]).resume is False
    assert parse_config(["--resume"]).resume is True
    assert parse_config(["--resume", "false"]).resume is False
    assert parse_config(["--resume=yes"]).resume is True
    with pytest.raises(SystemExit):
        parse_config(["--resume", "maybe"])


def test_from_dict_rejects_unknown_keys_and_round_trips():
    with pytest.raises(ConfigError, match="horizon"):
        TempoConfig.from_dict({"macro_rounds": 5, "horizon": 3})
    cfg = TempoConfig(macro_rounds=5, branches=3, r_max=2.0)
    assert TempoConfig.from_dict(cfg.to_dict()) == cfg
    assert TempoConfig.from_dict({"macro_rounds": 6}).macro_rounds == 6  # 30 % 6 = 0


def test_config_file_accepts_snake_and_kebab_keys(tmp_path):
    from tempo_plugin.config import load_config_file

    path = tmp_path / "tempo.yaml"
    path.write_text("macro-rounds: 3\nbranches: 8\nr_max: 2\nresume: true\n")
    cfg = load_config_file(str(path))
    assert (cfg.macro_rounds, cfg.branches, cfg.r_max, cfg.resume) == (3, 8, 2.0, True)
    assert isinstance(cfg.r_max, float)
    (tmp_path / "empty.yaml").write_text("")
    assert load_config_file(str(tmp_path / "empty.yaml")) == TempoConfig()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("horizon: 3\n", "unknown TEMPO setting 'horizon'"),
        ("macro_rounds: ten\n", "macro_rounds must be an integer"),
        ("macro_rounds: 2.5\n", "macro_rounds must be an integer"),
        ("branches: true\n", "branches must be an integer"),
        ("r_max: fast\n", "r_max must be a number"),
        ("resume: 1\n", "resume must be true or false"),
        ("- a\n- b\n", "must hold a mapping"),
        ("macro_rounds: [\n", "is not valid YAML"),
        ("macro_rounds: 7\n", "--max-episode-steps (30) must be a multiple of --macro-rounds (7)"),
    ],
)
def test_config_file_errors_are_one_line_and_name_the_key(tmp_path, text, expected):
    from tempo_plugin.config import load_config_file

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config_file(str(path))
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_missing_config_file_names_the_path(tmp_path):
    from tempo_plugin.config import load_config_file

    with pytest.raises(ConfigError, match="cannot read TEMPO config .*nope.yaml"):
        load_config_file(str(tmp_path / "nope.yaml"))


# ------------------------------------------------------------------ fresh share, critic reward, multi-turn


def test_new_defaults():
    cfg = TempoConfig()
    assert (cfg.env, cfg.eval_games, cfg.fresh_share, cfg.max_state_uses) == ("vaults", 64, 0.25, 2)
    assert (cfg.critic_reward, cfg.eval_every, cfg.max_env_steps, cfg.task) == ("squared", 0, 0, "")


@pytest.mark.parametrize("value", ["-0.01", "1.01", "2"])
def test_fresh_share_outside_unit_interval_names_its_flag(value):
    with pytest.raises(ConfigError, match="--fresh-share") as info:
        parse_config([f"--fresh-share={value}"])
    assert "[0, 1]" in str(info.value)


@pytest.mark.parametrize("value", ["0", "1", "0.5"])
def test_fresh_share_edges_are_valid(value):
    assert parse_config([f"--fresh-share={value}"]).fresh_share == float(value)


def test_max_state_uses_zero_is_valid():
    # 0 means "never removed"
    assert parse_config(["--max-state-uses", "0"]).max_state_uses == 0
    assert parse_config(["--eval-every", "0"]).eval_every == 0


def test_critic_reward_choices():
    assert parse_config(["--critic-reward", "abs"]).critic_reward == "abs"
    assert parse_config(["--critic-reward", "squared"]).critic_reward == "squared"
    with pytest.raises(SystemExit):  # argparse rejects a name outside the choices
        parse_config(["--critic-reward", "huber"])
    with pytest.raises(ConfigError, match="--critic-reward") as info:
        TempoConfig(critic_reward="huber").validate()
    assert "'huber'" in str(info.value)


@pytest.mark.parametrize(
    ("estimator", "task", "multi_turn", "task_name"),
    [
        ("tempo", "", True, "countdown"),
        ("tempo", "math", True, "math"),  # TEMPO always plays --env
        ("grpo", "", True, "countdown"),
        ("grpo", "countdown", False, "countdown"),
        ("grpo", "math", False, "math"),
        ("ppo", "", False, "countdown"),
        ("tppo", "math", False, "math"),
    ],
)
def test_multi_turn_and_task_name(estimator, task, multi_turn, task_name):
    cfg = TempoConfig(advantage_estimator=estimator, task=task)
    assert cfg.multi_turn is multi_turn
    assert cfg.task_name == task_name


def test_total_updates_of_multi_turn_grpo_are_the_td_updates_only():
    # multi-turn GRPO has no critic warm-up: 4 warm-up + 8 TD updates -> 8 updates
    assert TempoConfig(advantage_estimator="grpo", warmup_updates=4, td_updates=8).total_updates == 8
    # single-turn GRPO and TEMPO count both phases: 4 + 8 = 12
    assert TempoConfig(advantage_estimator="grpo", task="countdown", warmup_updates=4, td_updates=8).total_updates == 12
    assert TempoConfig(advantage_estimator="tempo", warmup_updates=4, td_updates=8).total_updates == 12
    # no TD updates leaves multi-turn GRPO with nothing to do, whatever the warm-up
    with pytest.raises(ConfigError, match="--td-updates"):
        TempoConfig(advantage_estimator="grpo", warmup_updates=4, td_updates=0).validate()
    assert TempoConfig(advantage_estimator="tempo", warmup_updates=4, td_updates=0).validate().total_updates == 4


@pytest.mark.parametrize("name", ["grad_clip", "eps_clip", "eps_clip_high", "weight_decay", "learning_rate",
                                  "td_learning_rate", "critic_learning_rate", "temperature", "fresh_share", "gamma"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_rejected_with_the_flag_name(name, value):
    flag_name = "--" + name.replace("_", "-")
    with pytest.raises(ConfigError) as info:
        parse_config([f"{flag_name}={value}"])
    assert str(info.value) == f"{flag_name} must be a finite number (got {float(value)})"


def test_unknown_env_and_task_are_rejected_before_anything_is_written(tmp_path, capsys):
    from tempo_plugin.train import main

    for argv, named in ((["--env", "chess"], "--env 'chess'"), (["--advantage-estimator", "grpo", "--task", "chess"], "--task 'chess'")):
        out = tmp_path / argv[-1]
        assert main(argv + ["--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {named} is not") and err.count("\n") == 0
        assert not out.exists()

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
NON_NEGATIVE_INTS = ["warmup_updates", "td_updates", "bootstrap_steps", "eval_games"]


def kebab(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_defaults_validate():
    cfg = TempoConfig()
    assert cfg.validate() is cfg
    assert parse_config([]) == cfg
    # defaults: T = 40 is a multiple of H = 10
    assert (cfg.max_episode_steps, cfg.macro_rounds) == (40, 10)
    assert cfg.total_updates == cfg.warmup_updates + cfg.td_updates


def test_parsed_values_have_field_types():
    cfg = parse_config(["--macro-rounds", "5", "--r-max", "2", "--restore", "replay", "--out", "x"])
    assert cfg.macro_rounds == 5 and isinstance(cfg.macro_rounds, int)
    assert cfg.r_max == 2.0 and isinstance(cfg.r_max, float)
    assert cfg.restore == "replay"
    assert cfg.out == "x"


def test_horizon_must_divide_episode_length():
    with pytest.raises(ConfigError) as info:
        parse_config(["--macro-rounds", "7"])  # 40 % 7 = 5
    assert "--max-episode-steps" in str(info.value)
    assert "--macro-rounds" in str(info.value)
    assert parse_config(["--macro-rounds", "8"]).macro_rounds == 8  # 40 % 8 = 0


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
        ("--weight-decay", "-1"), ("--grad-clip", "-1"),
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
    assert TempoConfig.from_dict({"macro_rounds": 4}).macro_rounds == 4


def test_config_file_accepts_snake_and_kebab_keys(tmp_path):
    from tempo_plugin.config import load_config_file

    path = tmp_path / "tempo.yaml"
    path.write_text("macro-rounds: 5\nbranches: 8\nr_max: 2\nresume: true\n")
    cfg = load_config_file(str(path))
    assert (cfg.macro_rounds, cfg.branches, cfg.r_max, cfg.resume) == (5, 8, 2.0, True)
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
        ("macro_rounds: 7\n", "--max-episode-steps (40) must be a multiple of --macro-rounds (7)"),
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

"""Tests for parsing the critic's <value> answer and for the critic prompt."""

from __future__ import annotations

import random

import pytest

from tempo_plugin.critic import (
    CRITIC_SYSTEM_PROMPT,
    aggregate_values,
    critic_messages,
    format_value,
    parse_value,
)
from tempo_plugin.envs.vault import VaultEnv

# ------------------------------------------------------------------------------------ parse_value


def test_last_match_wins():
    assert parse_value("<value>0.2</value> on second thought <value>0.7</value>") == pytest.approx(0.7)
    assert parse_value("<value>0.9</value>\n<value>0.1</value>") == pytest.approx(0.1)


def test_tags_are_case_insensitive():
    assert parse_value("<VALUE>0.3</Value>") == pytest.approx(0.3)
    assert parse_value("<Value>0.35</vAlUe>") == pytest.approx(0.35)


def test_whitespace_inside_tags_is_allowed():
    assert parse_value("<value> 0.25 \n</value>") == pytest.approx(0.25)
    assert parse_value("<value>\t1.00\t</value>") == 1.0


def test_values_above_one_are_clamped():
    assert parse_value("<value>1.5</value>") == 1.0
    assert parse_value("<value>42</value>") == 1.0


def test_negative_value_is_a_parse_failure():
    assert parse_value("<value>-0.2</value>") is None
    assert parse_value("<value>+0.2</value>") is None


def test_exponent_is_a_parse_failure():
    assert parse_value("<value>1e-1</value>") is None
    assert parse_value("<value>0.5E0</value>") is None


@pytest.mark.parametrize(
    "text",
    ["", "0.5", "value 0.5", "<value>0.5", "0.5</value>", "<value></value>", "<value>.5</value>",
     "<value>0.</value>", "<value>0.5 0.6</value>", "<value>nan</value>", "<value>inf</value>"],
)
def test_missing_or_malformed_tag_is_a_parse_failure(text):
    assert parse_value(text) is None


def test_integers_parse():
    assert parse_value("<value>1</value>") == 1.0
    assert parse_value("<value>0</value>") == 0.0
    assert isinstance(parse_value("<value>1</value>"), float)


def test_exact_two_decimal_answer():
    assert parse_value("The agent holds the right key. <value>0.83</value>") == pytest.approx(0.83)


# -------------------------------------------------------------------------------- aggregate_values


def test_aggregate_is_mean_of_parsed_values():
    # (0.2 + 0.6) / 2 = 0.4, the None is left out (not counted as 0: that would give 0.8 / 3)
    assert aggregate_values([0.2, None, 0.6]) == pytest.approx(0.4)
    assert aggregate_values([0.9]) == pytest.approx(0.9)


def test_aggregate_is_zero_when_nothing_parsed():
    assert aggregate_values([None, None]) == 0.0
    assert aggregate_values([]) == 0.0


# ------------------------------------------------------------------------------------------ fuzzing


def test_fuzz_parse_value_never_raises_and_stays_in_unit_interval():
    rng = random.Random(20240607)
    alphabet = [
        "<value>", "</value>", "<VALUE>", "</Value>", "<value", "value>", "<", ">", "/",
        "0", "1", "2", "5", "9", "00", "999999", "9" * 400, ".", "-", "+", "e", "E", " ", "\t", "\n",
        "ü", "🗝", "٣", "٠", "０", "５", "²", "\u00a0", "\x00", "a", "nan", "inf",
    ]
    parsed_some = 0
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        result = parse_value(text)
        assert result is None or (isinstance(result, float) and 0.0 <= result <= 1.0), (text, result)
        parsed_some += result is not None
    # the alphabet makes valid answers reasonably frequent: the fuzzing exercises both outcomes
    assert 0 < parsed_some < 2000


# ----------------------------------------------------------------------------------- critic prompt


def _user(messages):
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


def test_critic_prompt_contains_privileged_info_and_drops_action_list():
    env = VaultEnv(max_steps=40)
    env.reset(7)
    key = env.game.keys[0]
    env.step(f"take {key}")
    env.step("north")
    observation = env.observation
    assert " Actions: north, south, wait" in observation  # hall 2: the list the critic must not see
    hidden = env.privileged_info()
    messages = critic_messages(env.task, hidden, [f"take {key}", "north"], observation, 2, 40)
    assert messages[0]["content"] == CRITIC_SYSTEM_PROMPT
    user = _user(messages)
    assert f"Hidden: {hidden}" in user
    assert f"Task: {env.task}" in user
    assert f"Actions so far: take {key}, north" in user
    assert "Round 2 of 40." in user
    head = observation.partition(" Actions:")[0]
    assert f"Now: {head}\n" in user
    assert "Actions:" not in user
    assert "north, south, wait" not in user
    # the privileged info is not in the observation itself: it reaches the critic only via 'Hidden'
    assert hidden not in observation


def test_critic_prompt_keeps_observation_without_action_list_and_empty_history():
    messages = critic_messages("Do it.", "secret", [], "The vault opens. You win.", 0, 40)
    user = _user(messages)
    assert "Now: The vault opens. You win.\n" in user
    assert "Actions so far: (none yet)" in user


def test_format_value_two_decimals_and_round_trip():
    assert format_value(0.4234) == "<value>0.42</value>"
    assert parse_value(format_value(0.4234)) == pytest.approx(0.42)
    # clamped into [0, 1] before formatting
    assert format_value(1.7) == "<value>1.00</value>"
    assert format_value(-0.3) == "<value>0.00</value>"
    assert parse_value(format_value(-0.3)) == 0.0

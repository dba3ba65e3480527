"""The tiny model's critic demonstrations on the vault games: reasoning restates the hidden facts exactly."""

from __future__ import annotations

import random

from tempo_plugin.tiny.bootstrap import critic_reasoning, critic_value
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.envs.vault import VaultEnv

GAME = 5  # vault 1 of 3: sign "tree", keys white/green/gold, opens with green, 4 halls


def test_chain_reasoning_counts_the_keys_still_to_choose():
    env = VaultChainEnv(max_steps=30)
    env.reset(GAME)
    assert env.privileged_info().startswith("Vault 1 opens only with the green key.")
    seen = [critic_reasoning(env)]  # key room 1: all 3 keys to choose
    for action in ["take green", "north", "north", "north", "open vault"]:
        env.step(action)
        seen.append(critic_reasoning(env))
    assert seen[0] == "A plan can still win. Keys to choose: 3."
    # the right key held in the halls of vault 1, then key room 2 (the key stays in vault 1's lock)
    assert seen[1:] == ["A plan can still win. Keys to choose: 2."] * 5
    assert env.vaults_left == 2 and env.held is None


def test_chain_reasoning_and_value_after_a_wrong_key():
    env = VaultChainEnv(max_steps=30)
    env.reset(GAME)
    env.step("take white")
    assert critic_reasoning(env) == "No plan can win."
    assert critic_value(env, random.Random(0)) == 0.0


def _values(env, draws: int = 4000) -> list[float]:
    rng = random.Random(0)
    return [critic_value(env, rng) for _ in range(draws)]


def test_chain_values_fall_with_the_keys_to_choose_and_stay_spread():
    """u^(k + 1/2), u uniform: mean 1 / (k + 3/2); k = 3 -> 2/9 = 0.222, k = 2 -> 2/7 = 0.286,
    and the values still reach both ends of (0, 1) (no state starts with K identical answers)."""
    env = VaultChainEnv(max_steps=30)
    env.reset(GAME)
    in_room = _values(env)
    env.step("take green")  # the right key held: k = 2
    held = _values(env)
    for values, expected in ((in_room, 2 / 9), (held, 2 / 7)):
        assert abs(sum(values) / len(values) - expected) < 0.02  # std err ~0.005
        assert min(values) < 0.01 and max(values) > 0.9
    # P(v < 1/2) = P(u < 2^(-1/(k + 1/2))): k = 3 -> 0.820, k = 2 -> 0.758
    assert abs(sum(v < 0.5 for v in in_room) / len(in_room) - 0.820) < 0.025
    assert abs(sum(v < 0.5 for v in held) / len(held) - 0.758) < 0.025


def test_one_vault_values_are_uniform():
    env = VaultEnv(max_steps=30)
    env.reset(GAME)
    values = _values(env)
    assert abs(sum(values) / len(values) - 0.5) < 0.02
    assert abs(sum(v < 0.5 for v in values) / len(values) - 0.5) < 0.025


def test_one_vault_reasoning_has_no_key_count():
    env = VaultEnv(max_steps=30)
    env.reset(GAME)
    assert critic_reasoning(env) == "A plan can still win."

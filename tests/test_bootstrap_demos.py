"""The tiny model's critic demonstrations on the vault games: reasoning restates the hidden facts exactly."""

from __future__ import annotations

import random

from tempo_plugin.backends.local.bootstrap import critic_reasoning, critic_value
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


def test_winnable_values_are_spread_over_0_to_1():
    env = VaultChainEnv(max_steps=30)
    env.reset(GAME)
    rng = random.Random(0)
    values = [critic_value(env, rng) for _ in range(1000)]
    assert min(values) < 0.05 and max(values) > 0.95
    assert sum(v < 0.5 for v in values) in range(450, 551)


def test_one_vault_reasoning_has_no_key_count():
    env = VaultEnv(max_steps=30)
    env.reset(GAME)
    assert critic_reasoning(env) == "A plan can still win."

"""EnvPool (envs/pool.py) and its use by TempoRollout: environments are built once per run and
reused across branches and updates, a reused environment carries nothing over, and an
environment that raised is dropped."""

from __future__ import annotations

import pytest

from tempo_plugin.config import TempoConfig
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.envs.pool import EnvPool
from tempo_plugin.rollout.engine import ENV_ERROR
from tempo_plugin.updates.rollout import TempoRollout

T = 30


class Counting:
    """An environment factory that counts what it builds."""

    def __init__(self, cls=VaultChainEnv):
        self.cls, self.built = cls, 0

    def __call__(self):
        self.built += 1
        return self.cls(max_steps=T)


def test_pool_builds_only_when_empty_and_reuses_the_last_released():
    make = Counting()
    pool = EnvPool(make)
    a, b = pool.acquire(), pool.acquire()
    assert a is not b and make.built == 2 == pool.built
    pool.release(a)
    pool.release(b)
    assert pool.acquire() is b  # last in, first out
    assert pool.acquire() is a
    assert make.built == 2 and pool.reused == 2 and pool.idle == 0


def test_pool_prefers_an_environment_last_used_for_the_same_key():
    pool = EnvPool(Counting())
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    pool.release(a, 7)
    pool.release(b, 8)
    pool.release(c, 9)
    assert pool.acquire(7) is a  # the match, not the last released (c)
    assert pool.acquire(5) is c  # no match: the last released
    assert pool.acquire(8) is b


def test_pool_refuses_a_double_release():
    pool = EnvPool(Counting())
    env = pool.acquire()
    pool.release(env)
    with pytest.raises(ValueError, match="released twice"):
        pool.release(env)


def config(**overrides) -> TempoConfig:
    values = dict(states_per_batch=2, fresh_share=1.0, branches=3, critic_samples=2, endpoint_samples=2,
                  macro_rounds=3, max_episode_steps=T, max_assistant_tokens=8, critic_max_tokens=8,
                  audit_weight=0.0)  # TD targets alone: the scripted sampler answers the TD machinery's calls only
    values.update(overrides)
    return TempoConfig(**values).validate()


def rollout_with(sampler, protocol, make):
    return TempoRollout(config(), sampler, protocol, make_env=make)


def test_td_updates_build_one_environment_per_branch_once(tokenizer, protocol, tiny_model, one_thread):
    from tempo_plugin.samplers.local import LocalSampler

    make = Counting()
    rollout = rollout_with(LocalSampler(tiny_model, tokenizer), protocol, make)
    games = iter(range(100, 200))
    first = rollout.td_update(0, [], lambda: next(games))
    # S = 2 groups x N = 3 branches; fresh_state's environment is released before the group is restored
    assert make.built == 6
    rollout.td_update(1, first.new_states[:1], lambda: next(games))
    rollout.play_episodes([300, 301], seed=5)
    assert make.built == 6 and rollout.envs.idle == 6


def test_reused_environments_give_the_same_update_as_new_ones(tokenizer, protocol, tiny_model, one_thread):
    """Two TD updates, an evaluation and a third update: with the pool, and with a new environment
    for every branch (release made a no-op), every metric but the times is the same."""
    from tempo_plugin.samplers.local import LocalSampler

    def run(pooled: bool):
        make = Counting()
        rollout = rollout_with(LocalSampler(tiny_model, tokenizer), protocol, make)
        if not pooled:
            rollout.envs.release = lambda env, key=None: None
        games = iter(range(100, 200))
        records = []
        batch = rollout.td_update(0, [], lambda: next(games))
        records.append(batch.metrics)
        batch = rollout.td_update(1, batch.new_states[:1], lambda: next(games))
        records.append(batch.metrics)
        records.append({"eval": rollout.success_rate([300, 301, 302], seed=9)})
        records.append(rollout.td_update(2, batch.new_states[:2], lambda: next(games)).metrics)
        untimed = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]
        return untimed, make.built

    pooled, built_pooled = run(True)
    fresh, built_fresh = run(False)
    assert pooled == fresh
    assert built_pooled == 6 and built_fresh > 20


class RaisesOnGame101(VaultChainEnv):
    def step(self, action):
        if self.game.seed == 101:
            raise RuntimeError("simulator crashed")
        return super().step(action)


def test_an_environment_that_raised_is_dropped_not_reused(tokenizer, protocol):
    from tests.test_start_states import FakeSampler

    sampler = FakeSampler(tokenizer, ["<action>wait</action>"], ["<value>0.50</value>", "<value>0.20</value>"])
    make = Counting(RaisesOnGame101)
    rollout = rollout_with(sampler, protocol, make)
    games = iter([100, 101])
    batch = rollout.td_update(0, [], lambda: next(games))
    assert batch.metrics["rollout/env_errors"] == 3.0  # game 101's 3 branches
    assert make.built == 6 and rollout.envs.idle == 3  # game 100's three came back
    branches = rollout.play_episodes([101], seed=1)
    assert [b.stop_reason for b in branches] == [ENV_ERROR]
    assert rollout.envs.idle == 2 and make.built == 6

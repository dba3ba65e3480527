"""Tests for saved states: the FIFO StateStore, restore (snapshot / replay) and a TD update that
meets a state which cannot be restored."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Sequence

import pytest

from tempo_plugin.config import TempoConfig
from tempo_plugin.critic import CRITIC_SYSTEM_PROMPT
from tempo_plugin.envs.vault import VaultEnv
from tempo_plugin.rollout.engine import fresh_state
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams
from tempo_plugin.rollout.samples import ACTOR, CRITIC
from tempo_plugin.updates.rollout import TempoRollout
from tempo_plugin.states import MacroState, RestoreError, StateStore, restore_env

MAX_STEPS = 40


def played_state(seed: int, actions: Sequence[str], snapshot: bool = True) -> MacroState:
    """A MacroState built by hand from a VaultEnv after ``actions``."""
    env = VaultEnv(max_steps=MAX_STEPS)
    env.reset(seed)
    for action in actions:
        env.step(action)
    return MacroState(
        env_seed=seed,
        task=env.task,
        action_history=tuple(actions),
        observation=env.observation,
        privileged_info=env.privileged_info(),
        token_prefix=(),
        messages=(),
        round_index=len(actions),
        macro_index=0,
        snapshot=env.snapshot() if snapshot else None,
    )


def first_key(seed: int) -> str:
    env = VaultEnv(max_steps=MAX_STEPS)
    env.reset(seed)
    return env.game.keys[0]


def tagged(i: int) -> MacroState:
    """A cheap distinct state for store tests (env_seed = i)."""
    return MacroState(
        env_seed=i, task="t", action_history=(), observation=f"obs {i}", privileged_info="",
        token_prefix=(i,), messages=(), round_index=0, macro_index=0,
    )


# ------------------------------------------------------------------------------------- StateStore


def test_store_rejects_capacity_below_one():
    with pytest.raises(ValueError):
        StateStore(0, seed=0)


def test_store_fifo_evicts_oldest_at_capacity():
    store = StateStore(3, seed=0)
    assert store.add([tagged(0), tagged(1)]) == 2
    assert [s.env_seed for s in store] == [0, 1]
    assert store.add(tagged(i) for i in range(2, 5)) == 3
    # capacity 3 after adding 0..4: 0 and 1 (the oldest) are gone
    assert len(store) == 3
    assert [s.env_seed for s in store] == [2, 3, 4]
    store.add([tagged(5)])
    assert [s.env_seed for s in store] == [3, 4, 5]


def test_sample_returns_distinct_states_without_removing_them():
    store = StateStore(10, seed=1)
    store.add(tagged(i) for i in range(5))
    picked = store.sample(3)
    assert len(picked) == 3
    assert len({s.env_seed for s in picked}) == 3
    assert all(0 <= s.env_seed < 5 for s in picked)
    assert len(store) == 5
    # k above the size: min(k, size) = 5 distinct states, i.e. all of them
    everything = store.sample(10)
    assert sorted(s.env_seed for s in everything) == [0, 1, 2, 3, 4]
    assert store.sample(0) == []
    assert len(store) == 5
    assert StateStore(4, seed=0).sample(3) == []


def test_sampling_is_uniform():
    store = StateStore(5, seed=123)
    store.add(tagged(i) for i in range(5))
    counts: Counter[int] = Counter()
    draws = 5000
    for _ in range(draws):
        pair = store.sample(2)
        assert pair[0].env_seed != pair[1].env_seed
        counts.update(s.env_seed for s in pair)
    # each state is in a 2-of-5 sample with probability 2/5: expected 5000 * 2 / 5 = 2000 (+-10%)
    expected = draws * 2 / 5
    assert sum(counts.values()) == 2 * draws
    for i in range(5):
        assert abs(counts[i] - expected) <= 0.1 * expected, counts
    # chi-square with 4 degrees of freedom; 18.47 is its 0.999 quantile
    chi2 = sum((counts[i] - expected) ** 2 / expected for i in range(5))
    assert chi2 < 18.47, counts


def test_same_seed_gives_same_samples():
    a, b, c = StateStore(8, seed=42), StateStore(8, seed=42), StateStore(8, seed=43)
    for store in (a, b, c):
        store.add(tagged(i) for i in range(8))
    seq_a = [[s.env_seed for s in a.sample(3)] for _ in range(20)]
    seq_b = [[s.env_seed for s in b.sample(3)] for _ in range(20)]
    seq_c = [[s.env_seed for s in c.sample(3)] for _ in range(20)]
    assert seq_a == seq_b
    assert seq_a != seq_c


def test_save_load_round_trip_preserves_states_order_and_rng(tmp_path):
    store = StateStore(4, seed=9)
    vault_states = [played_state(11, [f"take {first_key(11)}", "north"]), played_state(12, [])]
    store.add([tagged(0), tagged(1)] + vault_states + [tagged(2)])  # 5 into capacity 4: tagged(0) evicted
    for _ in range(3):
        store.sample(2)  # advance the RNG: the saved stream must continue from here
    path = tmp_path / "store.json"
    store.save(path)
    loaded = StateStore.load(path)
    assert loaded.capacity == 4
    # saved as JSON without the environment snapshots (env-internal objects): a loaded state
    # restores by replay, to the same observation
    assert list(loaded) == [dataclasses.replace(s, snapshot=None) for s in store]
    assert any(s.snapshot is not None for s in store)
    assert [s.env_seed for s in loaded] == [1, 11, 12, 2]
    for saved, original in zip(list(loaded)[1:3], vault_states):
        env = VaultEnv(max_steps=40)
        restore_env(env, saved)
        assert env.observation == original.observation
    assert loaded is not store
    # the RNG stream continues identically
    for _ in range(10):
        assert loaded.sample(2) == [dataclasses.replace(s, snapshot=None) for s in store.sample(2)]
    # the restored capacity still evicts FIFO
    loaded.add([tagged(99)])
    assert [s.env_seed for s in loaded] == [11, 12, 2, 99]
    # a loaded vault state is still restorable ("auto" falls back to replay without a snapshot)
    env = VaultEnv(max_steps=MAX_STEPS)
    restore_env(env, list(loaded)[0], "auto")
    assert env.observation == vault_states[0].observation


# ----------------------------------------------------------------------------------------- restore


class CountingVault(VaultEnv):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.resets = 0
        self.steps_taken = 0

    def reset(self, seed):
        self.resets += 1
        return super().reset(seed)

    def step(self, action):
        self.steps_taken += 1
        return super().step(action)


def test_auto_restore_uses_the_snapshot_on_a_never_reset_env():
    state = played_state(5, [f"take {first_key(5)}", "north", "north", "wait"])
    env = CountingVault(max_steps=MAX_STEPS)
    restore_env(env, state, "auto")
    assert env.resets == 0 and env.steps_taken == 0  # no replay happened
    assert env.observation == state.observation
    assert env.position == 3  # take -> hall 1, north x2 -> hall 3, wait stays
    assert env.steps == 4


def test_auto_restore_prefers_snapshot_over_action_history():
    # action_history empty but snapshot taken after 2 actions: only a snapshot restore matches
    played = played_state(5, [f"take {first_key(5)}", "north"])
    state = dataclasses.replace(played, action_history=())
    env = VaultEnv(max_steps=MAX_STEPS)
    restore_env(env, state, "auto")
    assert env.observation == played.observation
    # replay of an empty history shows the key room: mismatch
    with pytest.raises(RestoreError):
        restore_env(VaultEnv(max_steps=MAX_STEPS), state, "replay")


def test_auto_restore_without_snapshot_falls_back_to_replay():
    state = played_state(6, [f"take {first_key(6)}", "north"], snapshot=False)
    env = CountingVault(max_steps=MAX_STEPS)
    restore_env(env, state, "auto")
    assert env.resets == 1 and env.steps_taken == 2
    assert env.observation == state.observation


def test_replay_restore_reproduces_the_state_and_the_next_step():
    actions = [f"take {first_key(8)}", "north", "wait", "north"]
    state = played_state(8, actions)
    original = VaultEnv(max_steps=MAX_STEPS)
    original.reset(8)
    for a in actions:
        original.step(a)

    restored = []
    for _ in range(2):
        env = CountingVault(max_steps=MAX_STEPS)
        env.reset(999)  # holds another game before the restore
        env.resets = 0
        restore_env(env, state, "replay")
        assert env.resets == 1 and env.steps_taken == 4  # replay, even though a snapshot exists
        assert env.observation == state.observation
        restored.append(env)
    expected = original.step("north")
    results = [env.step("north") for env in restored]
    assert results[0] == results[1] == expected
    assert restored[0].privileged_info() == restored[1].privileged_info() == original.privileged_info()


def test_replay_detects_a_changed_observation():
    state = played_state(8, [f"take {first_key(8)}", "north"])
    bad = dataclasses.replace(state, observation=state.observation + " ")
    with pytest.raises(RestoreError):
        restore_env(VaultEnv(max_steps=MAX_STEPS), bad, "replay")
    # the snapshot path checks the observation too
    with pytest.raises(RestoreError):
        restore_env(VaultEnv(max_steps=MAX_STEPS), bad, "auto")


def test_replay_detects_an_altered_action_history():
    key = first_key(8)
    state = played_state(8, [f"take {key}", "north", "north"])
    # 'wait' instead of the last 'north' shows 'Time passes. Hall 2 ...' instead of 'Hall 3 ...'
    bad = dataclasses.replace(state, action_history=(f"take {key}", "north", "wait"))
    with pytest.raises(RestoreError):
        restore_env(VaultEnv(max_steps=MAX_STEPS), bad, "replay")


def test_replay_detects_an_episode_that_ends_before_the_history_does():
    env = VaultEnv(max_steps=MAX_STEPS)
    env.reset(3)
    actions = [f"take {env.game.correct}"] + ["north"] * (env.game.length - 1) + ["open vault"]
    done_state = played_state(3, actions)
    bad = dataclasses.replace(done_state, action_history=tuple(actions) + ("north",))
    with pytest.raises(RestoreError, match="ended"):
        restore_env(VaultEnv(max_steps=MAX_STEPS), bad, "replay")


# --------------------------------------------------------------------------- TD update, bad start
# The TD-update tests below fix audit_weight 0: their scripted samplers answer the TD machinery's
# calls only (audits and their gate are tested in tests/test_critic_readout.py).


class FakeSampler:
    """Scripted completions: actor prompts cycle through ``actor_texts``, critic prompts (the critic
    system prompt is in the decoded prompt) through ``critic_texts``; every request is recorded."""

    def __init__(self, tokenizer, actor_texts, critic_texts):
        self.tokenizer = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.actor_texts = actor_texts
        self.critic_texts = critic_texts
        self.n_actor = 0
        self.n_critic = 0
        self.calls: list[tuple[list[int], str, Completion]] = []

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        out = []
        for request in requests:
            if CRITIC_SYSTEM_PROMPT in self.tokenizer.decode(list(request.prompt_ids)):
                role, text = CRITIC, self.critic_texts[self.n_critic % len(self.critic_texts)]
                self.n_critic += 1
            else:
                role, text = ACTOR, self.actor_texts[self.n_actor % len(self.actor_texts)]
                self.n_actor += 1
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.im_end]
            ids = ids[: request.max_new_tokens]
            k = len(self.calls)
            logprobs = [-(k + 1) / 8 - j / 64 for j in range(len(ids))]
            completion = Completion(ids, logprobs, text, "stop" if ids[-1] == self.im_end else "length")
            self.calls.append((list(request.prompt_ids), role, completion))
            out.append(completion)
        return out


def test_td_update_drops_a_state_that_fails_to_restore(tokenizer, protocol):
    cfg = TempoConfig(audit_weight=0.0, branches=2, critic_samples=2, states_per_batch=2, macro_rounds=5, max_episode_steps=MAX_STEPS)
    sampler = FakeSampler(
        tokenizer,
        actor_texts=["<action>north</action>", "<action>wait</action>", "<action>take red</action>"],
        critic_texts=["<value>0.50</value>", "<value>0.20</value>", "<value>0.90</value>"],
    )
    rollout = TempoRollout(cfg, sampler, protocol, make_env=lambda: VaultEnv(max_steps=MAX_STEPS))

    corrupted = dataclasses.replace(
        fresh_state(VaultEnv(max_steps=MAX_STEPS), 555, protocol), observation="CORRUPTED observation"
    )
    good = fresh_state(VaultEnv(max_steps=MAX_STEPS), 200, protocol)
    fresh_seeds = iter([101, 102, 103])
    batch = rollout.td_update(update=1, starts=[corrupted, good], next_game=lambda: next(fresh_seeds))

    # corrupted dropped (1 failure), good kept, one fresh game (101) refills the batch of 2
    assert batch.metrics["td/restore_failures"] == 1.0
    assert batch.metrics["td/fresh_states"] == 1.0
    assert next(fresh_seeds) == 102  # exactly one fresh game was drawn

    fresh_101 = fresh_state(VaultEnv(max_steps=MAX_STEPS), 101, protocol)
    corrupt_prefix = list(corrupted.token_prefix)
    assert corrupt_prefix != list(good.token_prefix)[: len(corrupt_prefix)]
    assert corrupt_prefix != list(fresh_101.token_prefix)[: len(corrupt_prefix)]

    # the sampler never saw the corrupted state, neither as actor prefix nor in a critic prompt
    for prompt_ids, role, _ in sampler.calls:
        assert prompt_ids[: len(corrupt_prefix)] != corrupt_prefix
        assert "CORRUPTED" not in tokenizer.decode(prompt_ids)
    # 2 groups x 2 branches x 5 rounds actor requests (no branch can end within 5 rounds)
    assert sum(role == ACTOR for _, role, _ in sampler.calls) == 20

    actor = [s for s in batch.samples if s.role == ACTOR]
    critic = [s for s in batch.samples if s.role == CRITIC]
    assert len(actor) > 0  # the scripted critic values make the groups non-degenerate
    assert batch.metrics["train/actor_samples"] == float(len(actor))
    assert batch.metrics["train/critic_samples"] == float(len(critic))
    prefixes = {0: list(good.token_prefix), 1: list(fresh_101.token_prefix)}
    for sample in actor:
        assert sample.group in prefixes
        assert sample.tokens[: len(prefixes[sample.group])] == prefixes[sample.group]
        assert sample.tokens[: len(corrupt_prefix)] != corrupt_prefix
    for sample in batch.samples:
        assert "CORRUPTED" not in tokenizer.decode(sample.tokens)
        assert sample.group in (0, 1)
    assert all(s.env_seed in (200, 101) for s in batch.new_states)
    assert len(batch.new_states) == 4  # every branch reached its macro boundary at round 5


def test_td_update_with_only_a_corrupted_start_refills_with_fresh_games(tokenizer, protocol):
    cfg = TempoConfig(audit_weight=0.0, branches=2, critic_samples=2, states_per_batch=2, macro_rounds=5, max_episode_steps=MAX_STEPS)
    sampler = FakeSampler(tokenizer, ["<action>north</action>", "<action>wait</action>"], ["<value>0.40</value>", "oops"])
    rollout = TempoRollout(cfg, sampler, protocol, make_env=lambda: VaultEnv(max_steps=MAX_STEPS))
    key = first_key(77)
    base = played_state(77, [f"take {key}", "north"])
    corrupted = dataclasses.replace(base, action_history=(f"take {key}", "wait"), snapshot=None)
    seeds = iter(range(300, 310))
    batch = rollout.td_update(update=2, starts=[corrupted], next_game=lambda: next(seeds))
    assert batch.metrics["td/restore_failures"] == 1.0
    assert batch.metrics["td/fresh_states"] == 2.0  # both groups come from fresh games 300, 301
    assert next(seeds) == 302
    assert {s.env_seed for s in batch.new_states} <= {300, 301}
    for prompt_ids, _, _ in sampler.calls:
        assert f"Hidden: {base.privileged_info}" not in tokenizer.decode(prompt_ids)


# --------------------------------------------------------------------------- TD update, bad branches


class RaisingVault(VaultEnv):
    """A vault whose ``step`` raises on its ``fail_at``-th call (every instance counts its own)."""

    fail_at = 0

    def __init__(self, **kw):
        super().__init__(**kw)
        self.steps_taken = 0

    def step(self, action):
        self.steps_taken += 1
        if self.steps_taken == self.fail_at:
            raise RuntimeError("simulator crashed")
        return super().step(action)


def test_a_raising_environment_drops_its_branch_and_the_update_proceeds(tokenizer, protocol):
    cfg = TempoConfig(audit_weight=0.0, branches=3, critic_samples=2, endpoint_samples=1, states_per_batch=2, macro_rounds=5,
                      max_episode_steps=MAX_STEPS, fresh_share=0.0)
    sampler = FakeSampler(tokenizer, ["<action>north</action>", "<action>wait</action>"],
                          ["<value>0.50</value>", "<value>0.20</value>", "<value>0.90</value>"])
    made = []

    def make_env():
        env = RaisingVault(max_steps=MAX_STEPS)
        env.fail_at = 3 if len(made) == 1 else 0  # the first branch of the first group raises at its 3rd step
        made.append(env)
        return env

    rollout = TempoRollout(cfg, sampler, protocol, make_env=make_env)
    starts = [fresh_state(VaultEnv(max_steps=MAX_STEPS), 400, protocol), fresh_state(VaultEnv(max_steps=MAX_STEPS), 401, protocol)]
    batch = rollout.td_update(update=1, starts=starts, next_game=lambda: 999)
    assert batch.metrics["rollout/env_errors"] == 1.0
    assert batch.metrics["td/dropped_groups"] == 0.0  # 2 branches are left in that group
    # 6 branches x 5 rounds, less the 2 rounds the raising branch never reached (its 3rd step raised)
    assert sum(role == ACTOR for _, role, _ in sampler.calls) == 30 - 2
    assert made[1].steps_taken == 3
    assert len(batch.new_states) == 5  # the raising branch gives no endpoint
    for sample in batch.samples:  # every trained actor branch played its 5 rounds: none is the raising one
        if sample.role == ACTOR:
            assert tokenizer.decode(sample.tokens).count("<|im_start|>assistant") == 5


def test_an_endpoint_without_a_parsed_value_drops_its_branch_not_valued_zero(tokenizer, protocol):
    cfg = TempoConfig(audit_weight=0.0, branches=2, critic_samples=2, endpoint_samples=1, states_per_batch=1, macro_rounds=5,
                      max_episode_steps=MAX_STEPS, fresh_share=0.0)
    # endpoint critic calls come first (2 endpoints x 1 sample): one garbage, one 0.8; then 2 start samples
    sampler = FakeSampler(tokenizer, ["<action>north</action>", "<action>wait</action>"],
                          ["no idea", "<value>0.80</value>", "<value>0.30</value>", "<value>0.60</value>"])
    rollout = TempoRollout(cfg, sampler, protocol, make_env=lambda: VaultEnv(max_steps=MAX_STEPS))
    batch = rollout.td_update(update=1, starts=[fresh_state(VaultEnv(max_steps=MAX_STEPS), 402, protocol)], next_game=lambda: 999)
    assert batch.metrics["critic/endpoint_unvalued"] == 1.0
    # one branch left: the group is dropped (no actor or critic samples), rather than trained
    # towards a target that counts the unparsed endpoint as a loss
    assert batch.metrics["td/dropped_groups"] == 1.0
    assert batch.samples == []
    assert len(batch.new_states) == 2  # both endpoints are sound states for later updates


def test_value_corr_pairs_each_start_estimate_with_its_own_groups_target_when_a_group_is_dropped(tokenizer, protocol):
    cfg = TempoConfig(audit_weight=0.0, branches=2, critic_samples=2, endpoint_samples=1, states_per_batch=4, macro_rounds=5,
                      max_episode_steps=MAX_STEPS, fresh_share=0.0)
    # 8 endpoints x 1 sample (group 0 loses one to garbage and is dropped), then 4 starts x 2 samples
    endpoint_texts = ["garbage", "<value>0.80</value>", "<value>0.20</value>", "<value>0.40</value>",
                      "<value>0.60</value>", "<value>1.00</value>", "<value>0.50</value>", "<value>0.50</value>"]
    start_texts = ["<value>0.10</value>", "<value>0.10</value>", "<value>0.30</value>", "<value>0.50</value>",
                   "<value>0.90</value>", "<value>0.70</value>", "<value>0.20</value>", "<value>0.20</value>"]
    sampler = FakeSampler(tokenizer, ["<action>wait</action>"], endpoint_texts + start_texts)
    rollout = TempoRollout(cfg, sampler, protocol, make_env=lambda: VaultEnv(max_steps=MAX_STEPS))
    starts = [fresh_state(VaultEnv(max_steps=MAX_STEPS), 410 + i, protocol) for i in range(4)]
    batch = rollout.td_update(update=1, starts=starts, next_game=lambda: 999)
    assert batch.metrics["td/dropped_groups"] == 1.0
    # groups 1-3: targets G = mean of the endpoint values (no reward within the macro-step) 0.3, 0.8, 0.5;
    # start estimates (mean of 2 samples) 0.4, 0.8, 0.2. Group 0's estimate 0.1 has no target.
    assert batch.metrics["critic/value_target_mean"] == pytest.approx((0.3 + 0.8 + 0.5) / 3)
    # Pearson by hand: dx = (-1/15, 5/15, -4/15), dy = (-7/30, 8/30, -1/30)
    # sxy = (14 + 80 + 8)/450, sxx = 42/225, syy = 114/900 -> r = 0.11333 / sqrt(0.18667 * 0.12667)
    assert batch.metrics["critic/value_corr"] == pytest.approx(0.7370, abs=5e-4)

"""Tests for the TD start states: the store's reuse cap (StateStore.sample(k, max_uses)), the fresh
share of every batch (updates.tempo.start_states) and how td_update fills and reports a batch."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Sequence

import pytest

from tempo_plugin.config import TempoConfig
from tempo_plugin.critic import CRITIC_SYSTEM_PROMPT
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.rollout.engine import fresh_state
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams
from tempo_plugin.rollout.samples import ACTOR, CRITIC
from tempo_plugin.updates.rollout import TempoRollout
from tempo_plugin.updates.tempo import RESTORE_ATTEMPTS_PER_STATE, start_states
from tempo_plugin.states import MacroState, StateStore

T = 30
H = 5


def tagged(i: int, macro_index: int = 0) -> MacroState:
    """A cheap distinct state for store tests (env_seed = i)."""
    return MacroState(
        env_seed=i, task="t", action_history=(), observation=f"obs {i}", privileged_info="",
        token_prefix=(i,), messages=(), round_index=H * macro_index, macro_index=macro_index,
    )


def seeds(states) -> list[int]:
    return [s.env_seed for s in states]


def uses(store: StateStore) -> list[int]:
    return store.state_dict()["uses"]


def config(**overrides) -> TempoConfig:
    # audit_weight 0: the critic's TD targets alone, so that these tests count the critic calls and
    # endpoint values of the TD machinery itself (audits and their gate: tests/test_critic_readout.py)
    values = dict(states_per_batch=4, fresh_share=0.25, max_state_uses=2, branches=2, critic_samples=2,
                  endpoint_samples=2, macro_rounds=H, max_episode_steps=T, audit_weight=0.0)
    values.update(overrides)
    return TempoConfig(**values).validate()


# ------------------------------------------------------------------------------- store reuse cap


def test_every_state_is_sampled_at_most_max_uses_times():
    store = StateStore(10, seed=3)
    store.add(tagged(i) for i in range(5))
    counts: Counter[int] = Counter()
    draws = 0
    while len(store):
        size = len(store)
        picked = store.sample(3, max_uses=2)
        draws += 1
        assert len(picked) == min(3, size) and len(set(seeds(picked))) == len(picked)
        counts.update(seeds(picked))
        # a state stays, in FIFO order, exactly while it has been drawn fewer than 2 times
        assert seeds(store) == [i for i in range(5) if counts[i] < 2]
        assert uses(store) == [counts[i] for i in range(5) if counts[i] < 2]
        assert draws < 20
    # 5 states x 2 uses = 10 picks in all, then the store is empty
    assert counts == Counter({i: 2 for i in range(5)})
    assert store.sample(3, max_uses=2) == []


def test_reuse_cap_by_hand():
    store = StateStore(10, seed=0)
    store.add(tagged(i) for i in range(5))
    # k = size: every state drawn once; 1 < 2 uses, so all stay
    assert sorted(seeds(store.sample(5, max_uses=2))) == [0, 1, 2, 3, 4]
    assert (len(store), uses(store)) == (5, [1, 1, 1, 1, 1])
    # the 2 states drawn now reach 2 uses and leave; the other 3 stay in FIFO order
    second = seeds(store.sample(2, max_uses=2))
    assert seeds(store) == [i for i in range(5) if i not in second]
    assert uses(store) == [1, 1, 1]
    # k above the size draws the remaining 3, which all leave
    assert sorted(seeds(store.sample(5, max_uses=2))) == sorted(i for i in range(5) if i not in second)
    assert len(store) == 0


def test_max_uses_one_samples_without_replacement_across_draws():
    store = StateStore(10, seed=5)
    store.add(tagged(i) for i in range(5))
    drawn = seeds(store.sample(2, max_uses=1)) + seeds(store.sample(2, max_uses=1))
    assert len(set(drawn)) == 4 and len(store) == 1
    last = store.sample(2, max_uses=1)  # only one left
    assert sorted(drawn + seeds(last)) == [0, 1, 2, 3, 4]
    assert len(store) == 0


def test_max_uses_zero_never_removes():
    store = StateStore(10, seed=1)
    store.add(tagged(i) for i in range(5))
    for _ in range(100):
        assert len(store.sample(3, max_uses=0)) == 3
    assert seeds(store) == [0, 1, 2, 3, 4]
    assert sum(uses(store)) == 300  # the uses are still counted
    assert store.sample(-1) == [] and sum(uses(store)) == 300


def test_uses_follow_fifo_eviction():
    store = StateStore(3, seed=0)
    store.add([tagged(0), tagged(1), tagged(2)])
    store.sample(3)  # uses [1, 1, 1]
    store.add([tagged(3)])  # 0 is evicted with its count
    assert (seeds(store), uses(store)) == ([1, 2, 3], [1, 1, 0])
    store.sample(3, max_uses=2)  # uses [2, 2, 1]: 1 and 2 leave
    assert (seeds(store), uses(store)) == ([3], [1])


def test_state_dict_carries_uses_and_loads_old_payloads(tmp_path):
    store = StateStore(5, seed=4)
    store.add(tagged(i) for i in range(4))
    store.sample(4)  # uses [1, 1, 1, 1]
    store.sample(4)  # uses [2, 2, 2, 2]
    store.add([tagged(4)])  # uses [2, 2, 2, 2, 0]
    payload = store.state_dict()
    assert payload["uses"] == [2, 2, 2, 2, 0]
    path = tmp_path / "store.json"
    store.save(path)
    loaded = StateStore.load(path)
    assert (seeds(loaded), uses(loaded)) == ([0, 1, 2, 3, 4], [2, 2, 2, 2, 0])
    # the same draws leave the same states: with a cap of 3 a state drawn once more leaves
    picked = loaded.sample(2, max_uses=3)
    assert picked == store.sample(2, max_uses=3)
    assert (seeds(loaded), uses(loaded)) == (seeds(store), uses(store))
    # a drawn state of 0..3 reaches 3 uses and leaves; 4, drawn, has 1 use and stays
    assert len(loaded) == 5 - sum(s.env_seed != 4 for s in picked)
    # a smaller capacity keeps the newest states with their own counts
    small = StateStore.from_state_dict(payload, capacity=2)
    assert (seeds(small), uses(small)) == ([3, 4], [2, 0])
    # a payload saved before the reuse cap has no "uses": every count starts at 0
    old = {k: v for k, v in payload.items() if k != "uses"}
    legacy = StateStore.from_state_dict(old)
    assert (seeds(legacy), uses(legacy)) == ([0, 1, 2, 3, 4], [0, 0, 0, 0, 0])
    legacy.sample(5, max_uses=2)
    assert len(legacy) == 5  # one use each, below the cap of 2


# --------------------------------------------------------------------------------- start_states


def full_store(size: int, seed: int = 0) -> StateStore:
    store = StateStore(64, seed=seed)
    store.add(tagged(i, macro_index=1 + i % 3) for i in range(size))
    return store


@pytest.mark.parametrize(
    ("fresh_share", "stored"),
    [(0.25, 3), (0.0, 4), (1.0, 0), (0.5, 2), (0.3, 2), (0.2, 3), (0.75, 1), (0.76, 0)],
)
def test_start_states_takes_all_but_the_fresh_share(fresh_share, stored):
    # S = 4: ceil(0.25 x 4) = 1 fresh -> 3 stored; ceil(0.3 x 4) = ceil(1.2) = 2 -> 2; ceil(0.2 x 4) = 1 -> 3;
    # ceil(0.76 x 4) = ceil(3.04) = 4 -> 0
    store = full_store(10)
    starts = start_states(store, config(fresh_share=fresh_share))
    assert len(starts) == stored
    assert len(set(seeds(starts))) == stored and set(seeds(starts)) <= set(range(10))
    assert len(store) == 10  # one use each, below the cap of 2
    assert sum(uses(store)) == stored


def test_start_states_when_the_store_is_smaller_than_the_request():
    store = full_store(2)
    starts = start_states(store, config(fresh_share=0.25))  # asks for 3, only 2 stored
    assert sorted(seeds(starts)) == [0, 1]
    assert start_states(StateStore(8, seed=0), config()) == []


def test_start_states_apply_the_reuse_cap():
    store = full_store(10)
    cfg = config(fresh_share=0.25, max_state_uses=1)
    starts = start_states(store, cfg)
    assert len(starts) == 3 and len(store) == 7
    assert not set(seeds(starts)) & set(seeds(store))
    cfg = config(fresh_share=0.25, max_state_uses=0)
    for _ in range(10):
        start_states(store, cfg)
    assert len(store) == 7


def test_start_states_fresh_count_is_exact_for_decimal_shares():
    # 28% of 25 start states is exactly 7 fresh games, so 18 come from the store
    store = full_store(30)
    assert len(start_states(store, config(states_per_batch=25, fresh_share=0.28))) == 18


# ------------------------------------------------------------------------- td_update batch filling


class FakeSampler:
    """Actor prompts cycle through ``actor_texts``, critic prompts (the critic system prompt is in the
    decoded prompt) through ``critic_texts``; counts the calls of each role."""

    def __init__(self, tokenizer, actor_texts, critic_texts):
        self.tokenizer = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.actor_texts, self.critic_texts = actor_texts, critic_texts
        self.counts: Counter[str] = Counter()
        self.actor_prompts: list[list[int]] = []

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        out = []
        for request in requests:
            if CRITIC_SYSTEM_PROMPT in self.tokenizer.decode(list(request.prompt_ids)):
                texts, role = self.critic_texts, CRITIC
            else:
                texts, role = self.actor_texts, ACTOR
                self.actor_prompts.append(list(request.prompt_ids))
            text = texts[self.counts[role] % len(texts)]
            self.counts[role] += 1
            ids = (self.tokenizer.encode(text, add_special_tokens=False) + [self.im_end])[: request.max_new_tokens]
            out.append(Completion(ids, [-0.125] * len(ids), text, "stop"))
        return out


def waiting_rollout(tokenizer, protocol, cfg, make_env=lambda: VaultChainEnv(max_steps=T)):
    """Actors that only wait (nothing ends within a macro-step), critics that disagree."""
    sampler = FakeSampler(tokenizer, ["<action>wait</action>"], ["<value>0.50</value>", "<value>0.20</value>",
                                                                 "<value>0.90</value>"])
    return TempoRollout(cfg, sampler, protocol, make_env=make_env), sampler


class Games:
    """next_game for td_update: 100, 101, ...; counts the draws."""

    def __init__(self, first: int = 100):
        self.next, self.drawn = first, 0

    def __call__(self) -> int:
        self.drawn += 1
        self.next += 1
        return self.next - 1


def stored_states(tokenizer, protocol) -> StateStore:
    """A store of real chain states: 8 after one macro-step (rounds 5) and 8 after two (round 10)."""
    cfg = config(fresh_share=1.0)
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg)
    first = rollout.td_update(0, [], Games(200))
    second = rollout.td_update(1, first.new_states[:4], Games(300))
    store = StateStore(64, seed=11)
    store.add(first.new_states + [s for s in second.new_states if s.macro_index == 2])
    assert Counter(s.macro_index for s in store) == Counter({1: 8, 2: 8})
    assert {s.round_index for s in store if s.macro_index == 2} == {10}
    return store


def test_td_update_tops_up_with_fresh_games_and_reports_start_depths(tokenizer, protocol):
    store = stored_states(tokenizer, protocol)
    cfg = config(fresh_share=0.25)
    starts = start_states(store, cfg)
    assert len(starts) == 3
    rollout, sampler = waiting_rollout(tokenizer, protocol, cfg)
    games = Games()
    batch = rollout.td_update(5, starts, games)
    # S = 4 groups: the 3 stored starts in order, then 1 fresh game (round 0, macro index 0)
    assert games.drawn == 1
    assert batch.metrics["td/fresh_states"] == 4 - len(starts) == 1.0
    assert batch.metrics["td/restore_failures"] == 0.0
    assert batch.start_depths == [s.macro_index for s in starts] + [0]
    assert batch.metrics["td/macro_index_mean"] == pytest.approx(sum(batch.start_depths) / 4)
    # every start of depth d was reached after 5 d rounds of waiting; the fresh game at round 0
    assert batch.metrics["td/start_round_mean"] == pytest.approx(sum(5 * d for d in batch.start_depths) / 4)
    # 4 groups x 2 branches x 5 rounds of actor requests; each group's branches extend its start
    assert sampler.counts[ACTOR] == 40
    prefixes = [list(s.token_prefix) for s in starts] + [list(fresh_state(VaultChainEnv(max_steps=T), 100, protocol).token_prefix)]
    for prefix in prefixes:
        assert sum(p[: len(prefix)] == prefix for p in sampler.actor_prompts) >= 2 * H
    # the endpoints are one macro-step deeper than their start
    assert sorted(s.macro_index for s in batch.new_states) == sorted(d + 1 for d in batch.start_depths for _ in range(2))
    assert sorted(s.round_index for s in batch.new_states) == sorted(5 * (d + 1) for d in batch.start_depths for _ in range(2))


@pytest.mark.parametrize(("fresh_share", "stored", "fresh"), [(0.0, 4, 0), (0.5, 2, 2), (1.0, 0, 4)])
def test_td_update_fresh_states_are_the_rest_of_the_batch(tokenizer, protocol, fresh_share, stored, fresh):
    store = stored_states(tokenizer, protocol)
    cfg = config(fresh_share=fresh_share)
    starts = start_states(store, cfg)
    assert len(starts) == stored
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg)
    games = Games()
    batch = rollout.td_update(6, starts, games)
    assert batch.metrics["td/fresh_states"] == float(fresh) == float(games.drawn)
    assert batch.start_depths == [s.macro_index for s in starts] + [0] * fresh


def test_td_update_with_a_store_smaller_than_the_request(tokenizer, protocol):
    store = stored_states(tokenizer, protocol)
    small = StateStore(4, seed=0)
    small.add([s for s in store if s.macro_index == 2][:1])
    cfg = config(fresh_share=0.25)
    starts = start_states(small, cfg)
    assert len(starts) == 1  # 3 asked, 1 stored
    rollout, _ = waiting_rollout(tokenizer, protocol, cfg)
    batch = rollout.td_update(7, starts, Games())
    assert batch.metrics["td/fresh_states"] == 3.0
    assert batch.start_depths == [2, 0, 0, 0]
    assert batch.metrics["td/start_round_mean"] == pytest.approx(10 / 4)


def test_td_update_replaces_a_state_that_does_not_restore(tokenizer, protocol):
    good = fresh_state(VaultChainEnv(max_steps=T), 7, protocol)
    bad = dataclasses.replace(fresh_state(VaultChainEnv(max_steps=T), 8, protocol), observation="CORRUPTED")
    cfg = config(states_per_batch=2)
    rollout, sampler = waiting_rollout(tokenizer, protocol, cfg)
    games = Games()
    batch = rollout.td_update(3, [bad, good], games)
    assert batch.metrics["td/restore_failures"] == 1.0
    assert batch.metrics["td/fresh_states"] == 1.0 and games.drawn == 1
    assert batch.start_depths == [0, 0]
    assert all("CORRUPTED" not in tokenizer.decode(p) for p in sampler.actor_prompts)


class NeverRestores(VaultChainEnv):
    """Restores its snapshots but then shows another observation: every restore is a mismatch."""

    def restore(self, snapshot):
        super().restore(snapshot)
        self._observation += " (changed)"


def test_td_update_gives_up_when_no_state_restores(tokenizer, protocol):
    cfg = config(states_per_batch=2)
    rollout, sampler = waiting_rollout(tokenizer, protocol, cfg, make_env=lambda: NeverRestores(max_steps=T))
    stored = fresh_state(VaultChainEnv(max_steps=T), 9, protocol)
    games = Games()
    with pytest.raises(RuntimeError, match="8 restores failed while filling 2 start states") as info:
        rollout.td_update(4, [stored], games)
    assert RESTORE_ATTEMPTS_PER_STATE == 4
    assert "--restore replay" in str(info.value) and "TD update 4" in str(info.value)
    # 4 x S = 8 failed restores: the stored state and 7 fresh games, then no more draws
    assert games.drawn == 7
    assert sum(sampler.counts.values()) == 0  # nothing was generated


def test_sampling_seeds_differ_between_run_seeds_updates_and_streams():
    from tempo_plugin.rollout.games import ENDPOINT_CRITIC, ROLLOUT, START_CRITIC, WARMUP_CRITIC, sampling_seed

    streams = (ROLLOUT, WARMUP_CRITIC, ENDPOINT_CRITIC, START_CRITIC)
    seeds = {sampling_seed(run, update, stream) for run in range(3) for update in range(200) for stream in streams}
    assert len(seeds) == 3 * 200 * len(streams)
    assert sampling_seed(0, 0) == 0 and sampling_seed(0, 2, START_CRITIC) == 2 * 31 + 13

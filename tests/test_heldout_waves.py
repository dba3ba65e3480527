"""Held-out success (``TempoRollout.success_rate``) in waves: more games than one sampler call has
rows for play in waves that one call takes whole at the longest trajectory, so every round after a
wave's first extends the cache the round before kept."""

from __future__ import annotations

from tempo_plugin.config import TempoConfig
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.rollout.games import sub_seed
from tempo_plugin.updates.rollout import TempoRollout
from tests.test_start_states import FakeSampler

T = 6


def config(**overrides) -> TempoConfig:
    values = dict(macro_rounds=3, max_episode_steps=T, max_assistant_tokens=8, max_trajectory_tokens=1024)
    values.update(overrides)
    return TempoConfig(**values).validate()


class Recording:
    """Counts each call's rows and seed, around another sampler."""

    def __init__(self, sampler, rows_per_call=None) -> None:
        self.sampler, self.calls = sampler, []
        if rows_per_call is not None:
            self.rows_per_call = rows_per_call

    def generate(self, requests, params, seed):
        self.calls.append((len(requests), seed))
        return self.sampler.generate(requests, params, seed)


def waiting(tokenizer):
    return FakeSampler(tokenizer, ["<action>wait</action>"], ["<value>0.5</value>"])


def test_games_that_fit_one_call_play_together_with_the_seed_as_given(tokenizer, protocol):
    # 4 rows a call at 1 token a row: 3 games fit, whatever their length
    sampler = Recording(waiting(tokenizer), rows_per_call=lambda row_tokens: 4 if row_tokens == 1 else 2)
    rollout = TempoRollout(config(), sampler, protocol, make_env=lambda: VaultChainEnv(max_steps=T, vaults=1))
    assert rollout.success_rate([300, 301, 302], seed=9) == 0.0  # waiting never wins
    assert sampler.calls == [(3, sub_seed(9, r)) for r in range(T)]


def test_more_games_than_one_call_takes_play_in_waves_with_a_seed_each(tokenizer, protocol):
    # 4 rows a call; at the longest trajectory (1,024 tokens) 2: five games play as 2 + 2 + 1
    calls_at: dict[int, int] = {}

    def rows_per_call(row_tokens: int) -> int:
        calls_at[row_tokens] = calls_at.get(row_tokens, 0) + 1
        return 4 if row_tokens == 1 else 2

    sampler = Recording(waiting(tokenizer), rows_per_call)
    rollout = TempoRollout(config(), sampler, protocol, make_env=lambda: VaultChainEnv(max_steps=T, vaults=1))
    assert rollout.success_rate([300, 301, 302, 303, 304], seed=9) == 0.0
    assert calls_at == {1: 1, 1024: 1}
    assert sampler.calls == [(rows, sub_seed(sub_seed(9, wave), r))
                             for wave, rows in enumerate((2, 2, 1)) for r in range(T)]


def test_a_sampler_without_rows_per_call_plays_every_game_in_one_call(tokenizer, protocol):
    sampler = Recording(waiting(tokenizer))
    rollout = TempoRollout(config(), sampler, protocol, make_env=lambda: VaultChainEnv(max_steps=T, vaults=1))
    rollout.success_rate(list(range(300, 370)), seed=9)
    assert sampler.calls == [(70, sub_seed(9, r)) for r in range(T)]


def test_local_sampler_rows_per_call_is_bounded_by_rows_and_tokens(tokenizer, tiny_model):
    from tempo_plugin.samplers.local import LocalSampler

    sampler = LocalSampler(tiny_model, tokenizer, max_batch_size=64, max_batch_tokens=65536)
    assert [sampler.rows_per_call(n) for n in (1, 1024, 2048, 3000, 70000)] == [64, 64, 32, 21, 1]


def test_each_wave_extends_its_kept_cache_round_after_round(tokenizer, protocol, tiny_model, one_thread):
    """On the local sampler every call but a wave's first reuses the kept cache; one call for all
    the games, split by rows, reuses none."""
    from tempo_plugin.samplers.local import LocalSampler

    cfg = config(max_episode_steps=12, max_trajectory_tokens=2048)
    games = list(range(300, 306))

    def play(waves: bool):
        local = LocalSampler(tiny_model, tokenizer, max_batch_size=4)
        sampler = Recording(local, local.rows_per_call if waves else None)
        rollout = TempoRollout(cfg, sampler, protocol, make_env=lambda: VaultChainEnv(max_steps=12, vaults=2))
        rollout.success_rate(games, seed=3)
        return local, sampler.calls

    local, calls = play(waves=True)
    first_calls = [i for i, (rows, seed) in enumerate(calls) if seed == sub_seed(sub_seed(3, 0), 0)
                   or seed == sub_seed(sub_seed(3, 1), 0)]
    assert [calls[i][0] for i in first_calls] == [4, 2]  # waves of 4 and 2 games
    assert local.reused_calls == len(calls) - 2 > 0
    split, split_calls = play(waves=False)
    assert split.reused_calls == 0 and split_calls[0][0] == 6  # all six games in one call, split by the sampler

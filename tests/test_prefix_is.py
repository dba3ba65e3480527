"""The prefix importance correction wired into TD updates (--prefix-is-clip): assistant spans of a
stored state, the current policy's log-prob of them (LocalSampler and over HTTP), and the weights
applied to each group's actor advantages; and --normalise-advantages, which divides the same
advantages by their std over the update."""

from __future__ import annotations

import math

import pytest
import torch

from tempo_plugin.samplers.local import LocalSampler
from tempo_plugin.samplers.sglang_http import HTTPSampler
from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.rollout.engine import Branch, RolloutLimits, fresh_state, run_branches
from tempo_plugin.rollout.samples import ACTOR
from tempo_plugin.rollout.sampler import Request, SamplingParams
from tempo_plugin.updates.rollout import TempoRollout
from tempo_plugin.states.store import state_from_dict, state_to_dict

T = 30


def config(**overrides) -> TempoConfig:
    values = dict(states_per_batch=2, fresh_share=0.0, branches=3, critic_samples=2, endpoint_samples=2,
                  macro_rounds=3, max_episode_steps=T, max_assistant_tokens=8, critic_max_tokens=8,
                  audit_weight=0.0)  # TD targets alone: the scripted sampler answers the TD machinery's calls only
    values.update(overrides)
    return TempoConfig(**values).validate()


def test_scoring_a_sampled_completion_gives_back_its_sampler_logprobs(tiny_model, tokenizer, protocol, one_thread):
    sampler = LocalSampler(tiny_model, tokenizer)
    prompt = list(fresh_state(VaultChainEnv(max_steps=T), 4, protocol).token_prefix)
    for temperature in (1.0, 0.7):
        (completion,) = sampler.generate([Request(prompt, 8)], SamplingParams(temperature), seed=3)
        (row,) = sampler.prompt_logprobs([prompt + completion.token_ids], temperature)
        assert len(row) == len(prompt) + len(completion.token_ids) and row[0] == 0.0
        assert row[len(prompt):] == pytest.approx(completion.logprobs, abs=1e-4)


def stored_states(sampler, protocol, tokenizer, cfg):
    """Two states one macro-step (3 rounds) into games 10 and 11, sampled in update 0."""
    branches = [Branch.from_state(fresh_state(VaultChainEnv(max_steps=T), game, protocol), VaultChainEnv(max_steps=T), g)
                for g, game in enumerate((10, 11))]
    for branch in branches:
        branch.env.reset(branch.start.env_seed)
    limits = RolloutLimits(horizon=3, max_episode_steps=T, max_trajectory_tokens=2048, max_assistant_tokens=8, state_every=3)
    run_branches(branches, sampler, protocol, SamplingParams(), limits, seed=1)
    return [b.state_after(len(b.rounds), 1, policy_version=0) for b in branches if len(b.rounds) == 3], branches


def test_a_state_keeps_the_spans_and_logprob_sum_of_its_assistant_tokens(tiny_model, tokenizer, protocol, one_thread):
    sampler = LocalSampler(tiny_model, tokenizer)
    states, branches = stored_states(sampler, protocol, tokenizer, config())
    assert states
    for state, branch in zip(states, branches):
        covered = [i for a, b in state.assistant_spans for i in range(a, b)]
        assert len(state.assistant_spans) == 3  # one completion per round
        assert covered == [i for i, m in enumerate(branch.loss_mask[: len(state.token_prefix)]) if m]
        assert state.prefix_logprob_sum == pytest.approx(sum(branch.logprobs[i] for i in covered))
        assert state_from_dict(state_to_dict(state)).assistant_spans == state.assistant_spans  # the store keeps them


class ScriptedCritic:
    """The tiny model as actor (and scorer); critic prompts answered with values in turn, so endpoints differ."""

    def __init__(self, sampler: LocalSampler):
        self.sampler, self.calls = sampler, 0
        self.im_end = sampler.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def prompt_logprobs(self, prompts, temperature):
        return self.sampler.prompt_logprobs(prompts, temperature)

    def generate(self, requests, params, seed):
        from tempo_plugin.critic import CRITIC_SYSTEM_PROMPT
        from tempo_plugin.rollout.sampler import Completion

        tokenizer = self.sampler.tokenizer
        if CRITIC_SYSTEM_PROMPT not in tokenizer.decode(list(requests[0].prompt_ids)):
            return self.sampler.generate(requests, params, seed)
        out = []
        for _ in requests:
            text = f"<value>{(0.1, 0.9, 0.4, 0.7, 0.2)[self.calls % 5]}</value>"
            self.calls += 1
            ids = tokenizer.encode(text, add_special_tokens=False) + [self.im_end]
            out.append(Completion(ids, [-0.5] * len(ids), text, "stop"))
        return out


def td_batch(sampler, protocol, states, update=1, **overrides):
    rollout = TempoRollout(config(**overrides), ScriptedCritic(sampler), protocol, make_env=lambda: VaultChainEnv(max_steps=T))
    return rollout.td_update(update, states, lambda: 99)


def test_unchanged_policy_gives_weight_one(tiny_model, tokenizer, protocol, one_thread):
    sampler = LocalSampler(tiny_model, tokenizer)
    states, _ = stored_states(sampler, protocol, tokenizer, config())
    batch = td_batch(sampler, protocol, states, prefix_is_clip=2.0)
    m = batch.metrics
    assert m["is/scored_states"] == len(states)
    assert abs(m["is/log_w_mean"]) < 1e-3 and m["is/clip_frac"] == 0.0 and m["is/ess"] == pytest.approx(1.0)
    assert m["is/staleness_mean"] == 1.0  # sampled in update 0, used in update 1


def test_weights_scale_each_groups_actor_advantages(tiny_model, tokenizer, protocol, one_thread):
    """After the policy moves, the same TD update with and without the correction samples the same
    tokens (same seed); each group's actor advantages differ by w = min(exp(L_cur - L_old), C),
    with L_cur recomputed here from the moved model."""
    sampler = LocalSampler(tiny_model, tokenizer)
    states, _ = stored_states(sampler, protocol, tokenizer, config())
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.mul_(1.15)  # a different policy
    plain = td_batch(sampler, protocol, states)
    weighted = td_batch(sampler, protocol, states, prefix_is_clip=1.5)
    rows = sampler.prompt_logprobs([list(s.token_prefix) for s in states], 1.0)
    log_w = [sum(sum(r[a:b]) for a, b in s.assistant_spans) - s.prefix_logprob_sum for s, r in zip(states, rows)]
    w = [min(math.exp(x), 1.5) for x in log_w]
    assert any(abs(x) > 0.05 for x in log_w)  # the policy did move
    actor = lambda batch: [s for s in batch.samples if s.role == ACTOR]  # noqa: E731
    assert len(actor(plain)) == len(actor(weighted)) > 0
    for a, b in zip(actor(plain), actor(weighted)):
        assert a.tokens == b.tokens and a.group == b.group
        scale = w[a.group]
        assert [x * scale for x in a.advantages] == pytest.approx(b.advantages, rel=1e-6, abs=1e-9)
    assert weighted.metrics["is/log_w_mean"] == pytest.approx(sum(log_w) / len(log_w), abs=1e-4)
    assert weighted.metrics["is/clip_frac"] == sum(x > math.log(1.5) for x in log_w) / len(log_w)
    critic = lambda batch: [s.advantages for s in batch.samples if s.role != ACTOR]  # noqa: E731
    assert critic(plain) == critic(weighted)  # the critic reward is not weighted


def test_stale_states_get_weight_zero(tiny_model, tokenizer, protocol, one_thread):
    sampler = LocalSampler(tiny_model, tokenizer)
    states, _ = stored_states(sampler, protocol, tokenizer, config())
    batch = td_batch(sampler, protocol, states, update=5, prefix_is_clip=2.0, prefix_is_max_staleness=3)
    # sampled in update 0, used in update 5: 5 > 3 updates old -> weight 0, no actor sample
    assert batch.metrics["is/stale_states"] == len(states) and batch.metrics["is/weight_mean"] == 0.0
    assert [s for s in batch.samples if s.role == ACTOR] == []
    assert batch.metrics["train/critic_samples"] > 0  # the critic still trains on them


def test_the_correction_needs_a_sampler_that_scores(tokenizer, protocol):
    class GenerateOnly:
        def generate(self, requests, params, seed):
            raise AssertionError

    with pytest.raises(ConfigError, match="--prefix-is-clip needs a sampler that scores prompts"):
        TempoRollout(config(prefix_is_clip=2.0), GenerateOnly(), protocol, make_env=lambda: VaultChainEnv(max_steps=T))
    with pytest.raises(ConfigError, match="--prefix-is-clip must be >= 0"):
        config(prefix_is_clip=-1.0)


def test_scoring_over_http_matches_the_local_sampler(serve, tiny_model, tokenizer, protocol, one_thread):
    """SGLang's scoring request (max_new_tokens 0, logprob_start_len 0): the local server answers it
    as SGLang does, and the HTTP sampler reads it back."""
    sampler = LocalSampler(tiny_model, tokenizer)
    url = serve(sampler)
    prompts = [list(fresh_state(VaultChainEnv(max_steps=T), g, protocol).token_prefix) for g in (1, 2)]
    remote = HTTPSampler(f"{url}/generate").prompt_logprobs(prompts, 0.8)
    local = sampler.prompt_logprobs(prompts, 0.8)
    assert [len(r) for r in remote] == [len(p) for p in prompts]
    for r, l in zip(remote, local):
        assert r == pytest.approx(l, abs=1e-5)


def test_normalise_advantages_divides_the_updates_actor_advantages_by_their_std(tiny_model, tokenizer, protocol, one_thread):
    """The same TD update (same seed) with and without --normalise-advantages samples the same
    tokens; each actor advantage is divided by sigma, the population std over all 2 x 3 branches
    of the update (branches with A = 0 train no sample but count), computed here from the plain
    batch's samples; the critic samples are unchanged."""
    sampler = LocalSampler(tiny_model, tokenizer)
    states, _ = stored_states(sampler, protocol, tokenizer, config())
    plain = td_batch(sampler, protocol, states, normalise_advantages=False)
    scaled = td_batch(sampler, protocol, states, normalise_advantages=True)
    actor = lambda batch: [s for s in batch.samples if s.role == ACTOR]  # noqa: E731
    assert plain.metrics["td/dropped_groups"] == 0
    advantages = [next(a for a in s.advantages if a != 0.0) for s in actor(plain)]
    assert len(advantages) >= 2  # the scripted endpoint values differ
    branches = 2 * 3
    sigma = math.sqrt(sum(a * a for a in advantages) / branches - (sum(advantages) / branches) ** 2)
    assert plain.metrics["actor/advantage_std"] == pytest.approx(sigma, rel=1e-9)
    assert len(actor(plain)) == len(actor(scaled))
    for a, b in zip(actor(plain), actor(scaled)):
        assert a.tokens == b.tokens and a.group == b.group
        assert [x / sigma for x in a.advantages] == pytest.approx(b.advantages, rel=1e-9, abs=1e-12)
    critic = lambda batch: [s.advantages for s in batch.samples if s.role != ACTOR]  # noqa: E731
    assert critic(plain) == critic(scaled)


def test_critic_advantage_std_rescales_the_updates_critic_advantages(tiny_model, tokenizer, protocol, one_thread):
    """The same TD update (same seed) with --critic-advantage-std 0 and 0.5: each critic advantage
    A_k = r_k - mean_j r_j is multiplied by 0.5 / sigma, sigma the population std over the K = 2
    samples of both start states (4 advantages), computed here from the plain batch's samples;
    the actor samples are unchanged."""
    sampler = LocalSampler(tiny_model, tokenizer)
    states, _ = stored_states(sampler, protocol, tokenizer, config())
    plain = td_batch(sampler, protocol, states, critic_advantage_std=0.0)
    scaled = td_batch(sampler, protocol, states, critic_advantage_std=0.5)
    critic = lambda batch: [s for s in batch.samples if s.role != ACTOR]  # noqa: E731
    assert plain.metrics["td/dropped_groups"] == 0
    advantages = [next(a for a in s.advantages if a != 0.0) for s in critic(plain)]
    assert len(advantages) == 2 * 2  # the scripted answers differ within each state
    sigma = math.sqrt(sum(a * a for a in advantages) / 4 - (sum(advantages) / 4) ** 2)
    assert sigma > 0.01
    assert plain.metrics["critic/advantage_std"] == pytest.approx(sigma, rel=1e-9)
    assert scaled.metrics["critic/advantage_std"] == pytest.approx(sigma, rel=1e-9)  # the raw std, logged either way
    assert len(critic(plain)) == len(critic(scaled))
    for a, b in zip(critic(plain), critic(scaled)):
        assert a.tokens == b.tokens and a.group == b.group and a.reward == b.reward
        assert [x * 0.5 / sigma for x in a.advantages] == pytest.approx(b.advantages, rel=1e-9, abs=1e-12)
    actor = lambda batch: [(s.tokens, s.advantages) for s in batch.samples if s.role == ACTOR]  # noqa: E731
    assert actor(plain) == actor(scaled)

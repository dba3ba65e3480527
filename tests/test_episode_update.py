"""Tests for multi-turn GRPO (TempoRollout.episode_update): N complete episodes per game, every
action of an episode trained with the group-relative advantage of its return."""

from __future__ import annotations

import re
from typing import Sequence

import pytest

from tempo_plugin.algorithms.grpo import GRPO_STD_EPSILON
from tempo_plugin.config import TempoConfig
from tempo_plugin.envs.chain import SIGNS, VaultChainEnv
from tempo_plugin.rollout.engine import fresh_state
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams
from tempo_plugin.rollout.samples import ACTOR
from tempo_plugin.updates.rollout import TempoRollout

T = 30
KEY_ROOM = re.compile(r"Key room \d of \d\. The sign shows a ([a-z]+)\. Keys: ([a-z, ]+)\.")


class ChainSampler:
    """Plays the chain by its last observation: the key the sign names (or, for the first call's
    request indices in ``wrong_first``, the first other key), north, and open vault at the door.
    Records each request's action by its prompt."""

    def __init__(self, tokenizer, wrong_first: set[int], wasteful_first: frozenset[int] = frozenset()):
        self.tokenizer = tokenizer
        self.wasteful_first = wasteful_first  # these first-call requests answer an action the game rejects
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.wrong_first = wrong_first
        self.calls = 0
        self.actions: list[str] = []

    def action(self, observation: str, wrong: bool) -> str:
        room = KEY_ROOM.search(observation)
        if room:
            correct = SIGNS[room[1]]
            keys = room[2].split(", ")
            return "take " + (next(k for k in keys if k != correct) if wrong else correct)
        return "open vault" if "at its door" in observation else "north"

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        out = []
        for i, request in enumerate(requests):
            text = self.tokenizer.decode(list(request.prompt_ids))
            observation = text.rsplit("<|im_start|>user\n", 1)[1]
            action = self.action(observation, self.calls == 0 and i in self.wrong_first)
            if self.calls == 0 and i in self.wasteful_first:
                action = "dance"
            self.actions.append(action)
            reply = f"<action>{action}</action>"
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.im_end]
            assert len(ids) <= request.max_new_tokens
            out.append(Completion(ids, [-0.25] * len(ids), reply, "stop"))
        self.calls += 1
        return out


def expert_actions(seed: int) -> list[str]:
    env = VaultChainEnv(max_steps=T)
    env.reset(seed)
    actions = []
    while (action := env.expert_action()) is not None:
        actions.append(action)
        env.step(action)
    assert env.won
    return actions


def losing_actions(seed: int) -> list[str]:
    """Take the first key other than the right one in key room 1, walk north, open: lost."""
    env = VaultChainEnv(max_steps=T)
    env.reset(seed)
    vault = env.game.vaults[0]
    wrong = next(k for k in vault.keys if k != vault.correct)
    return [f"take {wrong}"] + ["north"] * (vault.length - 1) + ["open vault"]


def trained_tokens(tokenizer, actions: list[str]) -> int:
    """Completion tokens of an episode: <action>...</action> plus the stop token per round."""
    return sum(len(tokenizer.encode(f"<action>{a}</action>", add_special_tokens=False)) + 1 for a in actions)


def rollout_for(tokenizer, protocol, wrong_first: set[int]) -> tuple[TempoRollout, ChainSampler]:
    cfg = TempoConfig(advantage_estimator="grpo", branches=4, states_per_batch=2, macro_rounds=5,
                      max_episode_steps=T).validate()
    sampler = ChainSampler(tokenizer, wrong_first)
    return TempoRollout(cfg, sampler, protocol, make_env=lambda: VaultChainEnv(max_steps=T)), sampler


def test_games_of_the_hand_example():
    # game 0: vault 1 has 3 halls (silver opens it), 11 expert steps; game 2: vault 1 has 2 halls (gold)
    assert expert_actions(0)[:4] == ["take silver", "north", "north", "open vault"] and len(expert_actions(0)) == 11
    assert losing_actions(0) == ["take gold", "north", "north", "open vault"]
    assert losing_actions(2) == ["take silver", "north", "open vault"]


def test_two_wins_of_four_give_plus_and_minus_one(tokenizer, protocol):
    # episodes in group order: game 0 x 4 (the last 2 take a wrong key), game 2 x 4 (all take a wrong key)
    rollout, sampler = rollout_for(tokenizer, protocol, wrong_first={2, 3, 4, 5, 6, 7})
    batch = rollout.episode_update(3, [0, 2])
    # game 0: R = [1, 1, 0, 0], mean 1/2, population std 1/2 -> A = +-(1/2) / (1/2 + eps) ~ +-1
    # game 2: R = [0, 0, 0, 0] -> A = 0: degenerate, no samples
    u = 0.5 / (0.5 + GRPO_STD_EPSILON)
    assert u == pytest.approx(1.0, abs=3e-6)
    samples = batch.samples
    assert len(samples) == 4
    assert [s.reward for s in samples] == [1.0, 1.0, 0.0, 0.0]
    assert all(s.role == ACTOR and s.group == 0 for s in samples)
    prefix = list(fresh_state(VaultChainEnv(max_steps=T), 0, protocol).token_prefix)
    episodes = [expert_actions(0)] * 2 + [losing_actions(0)] * 2
    for sample, advantage, actions in zip(samples, [u, u, -u, -u], episodes):
        assert sample.tokens[: len(prefix)] == prefix
        trained = [i for i, m in enumerate(sample.loss_mask) if m == 1]
        assert len(trained) == trained_tokens(tokenizer, actions)  # every action of the episode is trained
        assert trained[0] == len(prefix) and trained[-1] == len(sample.tokens) - 1
        for i, (m, a) in enumerate(zip(sample.loss_mask, sample.advantages)):
            assert a == (advantage if m else 0.0), i
        assert sample.old_logprobs == [-0.25 if m else 0.0 for m in sample.loss_mask]
    # the scripted episodes really were the expert's and the losing ones
    assert sampler.actions.count("open vault") == 3 * 2 + 2 + 4
    m = batch.metrics
    assert m["rollout/success_rate"] == 2 / 8
    assert m["actor/degenerate_group_rate"] == 0.5
    assert (m["train/actor_samples"], m["train/critic_samples"]) == (4.0, 0.0)
    # rounds: 11 + 11 + 4 + 4 (game 0) + 3 x 4 (game 2) = 42
    assert m["rollout/rounds"] == 42.0
    assert m["rollout/steps_mean"] == pytest.approx(42 / 8)
    assert m["rollout/valid_action_rate"] == 1.0 and m["rollout/admissible_action_rate"] == 1.0
    assert batch.new_states == [] and batch.start_depths == []


def test_one_win_of_four(tokenizer, protocol):
    rollout, _ = rollout_for(tokenizer, protocol, wrong_first={1, 2, 3})
    batch = rollout.episode_update(0, [0])
    # R = [1, 0, 0, 0]: mean 1/4, population std sqrt(3)/4 -> A = (3/4, -1/4, -1/4, -1/4) / (sqrt(3)/4 + eps)
    d = 3 ** 0.5 / 4 + GRPO_STD_EPSILON
    want = [0.75 / d, -0.25 / d, -0.25 / d, -0.25 / d]
    assert len(batch.samples) == 4
    for sample, advantage in zip(batch.samples, want):
        values = {a for a, m in zip(sample.advantages, sample.loss_mask) if m}
        assert len(values) == 1 and values.pop() == pytest.approx(advantage, abs=1e-12)
    assert batch.metrics["actor/degenerate_group_rate"] == 0.0
    assert batch.metrics["rollout/success_rate"] == 0.25


@pytest.mark.parametrize(("wrong_first", "success"), [({0, 1, 2, 3}, 0.0), (set(), 1.0)])
def test_a_game_all_lost_or_all_won_gives_no_samples(tokenizer, protocol, wrong_first, success):
    rollout, _ = rollout_for(tokenizer, protocol, wrong_first)
    batch = rollout.episode_update(1, [2])
    assert batch.samples == []
    assert batch.metrics["actor/degenerate_group_rate"] == 1.0
    assert batch.metrics["train/actor_samples"] == 0.0
    assert batch.metrics["rollout/success_rate"] == success


def test_invalid_action_penalty_separates_equal_returns(tokenizer, protocol):
    # all 4 episodes win (R = 1); episode 3 first answers "dance", which the game rejects: u = (0, 0, 0, 1)
    # R' = R - 0.1 u = (1, 1, 1, 0.9): mean 0.975, population std sqrt(3 x 0.025^2 + 0.075^2) / 2 = 0.0433
    rollout, sampler = rollout_for(tokenizer, protocol, wrong_first=set())
    sampler.wasteful_first = frozenset({3})
    rollout.cfg.invalid_action_penalty = 0.1  # the expectations above are for c = 0.1
    batch = rollout.episode_update(0, [0])
    std = (3 * 0.025 ** 2 + 0.075 ** 2) ** 0.5 / 2
    want = [0.025 / (std + GRPO_STD_EPSILON)] * 3 + [-0.075 / (std + GRPO_STD_EPSILON)]
    assert len(batch.samples) == 4
    for sample, advantage in zip(batch.samples, want):
        values = {a for a, m in zip(sample.advantages, sample.loss_mask) if m}
        assert len(values) == 1 and values.pop() == pytest.approx(advantage, rel=1e-9)
    assert [s.reward for s in batch.samples] == [1.0] * 4  # the reported return is the environment's
    assert batch.metrics["rollout/admissible_action_rate"] == pytest.approx(1 - 1 / (4 * 11 + 1))
    # without the penalty the group is degenerate: no samples
    rollout.cfg.invalid_action_penalty = 0.0
    sampler.calls = 0
    assert rollout.episode_update(0, [0]).samples == []

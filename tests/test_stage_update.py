"""Temporal GRPO on the embedded runtime (TempoRollout.stage_update): the chain's milestones, each
episode's stage intervals and the per-round advantages, on a hand example."""

from __future__ import annotations

import math
from typing import Sequence

import pytest

from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.envs.chain import SIGNS, VaultChainEnv
from tempo_plugin.envs.vault import VaultEnv
from tempo_plugin.rollout.sampler import Completion, Request, SamplingParams
from tempo_plugin.rollout.samples import make_sample, per_run_values
from tempo_plugin.updates.rollout import TempoRollout
from tests.test_episode_update import KEY_ROOM

T = 30


def test_chain_milestones_follow_the_privileged_state():
    env = VaultChainEnv(max_steps=T)
    env.reset(0)
    assert env.stage_count == 6  # 3 vaults x (right key held, vault open)
    seen = [env.stages_completed()]
    while (action := env.expert_action()) is not None:
        env.step(action)
        seen.append(env.stages_completed())
    # game 0: vault 1 has 3 halls: take (1), north, north, open (2); then vaults 2 and 3 likewise
    lengths = [v.length for v in env.game.vaults]
    expected = [0]
    for i, length in enumerate(lengths):
        expected += [2 * i + 1] * length + [2 * i + 2]
    assert lengths[0] == 3 and seen == expected and seen[-1] == 6 and env.won
    env.reset(0)
    wrong = next(k for k in env.vault.keys if k != env.vault.correct)
    env.step(f"take {wrong}")
    assert env.stages_completed() == 0  # the wrong key is no milestone
    env.step("dance")  # an action the game rejects changes nothing
    assert env.stages_completed() == 0


def test_one_vault_milestones():
    env = VaultEnv(max_steps=40)
    env.reset(3)
    assert env.stage_count == 2 and env.stages_completed() == 0
    env.step(env.expert_action())
    assert env.stages_completed() == 1
    while not env.done:
        env.step(env.expert_action())
    assert env.won and env.stages_completed() == 2


def test_per_round_advantages_fill_each_completion():
    mask = [0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1]
    assert per_run_values(mask, [0.5, -1.0, 2.0]) == [0, 0, 0.5, 0.5, 0, -1.0, 0, 0, 2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="2 per-round advantages for 3 completions"):
        per_run_values(mask, [0.5, -1.0])
    sample = make_sample(list(range(13)), mask + [0, 0], [0.0] * 13, [0.5, -1.0, 2.0], "actor", 0, 1.0)
    assert sample.advantages == [0, 0, 0.5, 0.5, 0, -1.0, 0, 0, 2.0, 2.0, 2.0]  # trailing context trimmed


class ScriptedChain:
    """Plays by the last observation: the key the sign names, north, open vault at the door; in the
    (call, request index) pairs of ``wrong`` it takes the first other key instead."""

    def __init__(self, tokenizer, wrong: set[tuple[int, int]]):
        self.tokenizer, self.wrong = tokenizer, wrong
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls = 0

    def generate(self, requests: Sequence[Request], params: SamplingParams, seed: int) -> list[Completion]:
        out = []
        for i, request in enumerate(requests):
            observation = self.tokenizer.decode(list(request.prompt_ids)).rsplit("<|im_start|>user\n", 1)[1]
            room = KEY_ROOM.search(observation)
            if room:
                correct = SIGNS[room[1]]
                key = next(k for k in room[2].split(", ") if k != correct) if (self.calls, i) in self.wrong else correct
                action = f"take {key}"
            else:
                action = "open vault" if "at its door" in observation else "north"
            reply = f"<action>{action}</action>"
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.im_end]
            out.append(Completion(ids, [-0.25] * len(ids), reply, "stop"))
        self.calls += 1
        return out


def test_stage_advantages_credit_each_round_with_its_stage(tokenizer, protocol):
    """Game 0, N = 3: b0 wins; b1 passes vault 1 and takes a wrong key in key room 2 (round 4);
    b2 takes a wrong key in key room 1. Stages (K = 6): key 1, vault 1, key 2, vault 2, key 3, vault 3.

    outcomes       b0 [1 1 1 1 1 1], b1 [1 1 0 0 0 0], b2 [0 0 0 0 0 0]
    stage 1 (all three):   R = [1, 1, 0], mu = 2/3, sigma = sqrt(2/9) -> A = +1/sqrt(2), +1/sqrt(2), -sqrt(2)
    stage 2 (b0, b1):      R = [1, 1], sigma = 0 -> 0
    stage 3 (b0, b1):      R = [1, 0], mu = 1/2, sigma = 1/2 -> A = +1, -1
    stages 4-6 (b0 only):  one participant -> 0
    rounds: b0: round 0 (takes key 1) +1/sqrt(2); rounds 1-3 (to vault 1) 0; round 4 (key 2) +1; later 0
            b1: round 0 +1/sqrt(2); rounds 1-3 0; round 4 to its loss (stage 3, never completed) -1
            b2: all 4 rounds (stage 1, never completed) -sqrt(2)
    """
    cfg = TempoConfig(advantage_estimator="temporal_grpo", branches=3, states_per_batch=1, macro_rounds=5,
                      max_episode_steps=T).validate()
    sampler = ScriptedChain(tokenizer, wrong={(0, 2), (4, 1)})
    rollout = TempoRollout(cfg, sampler, protocol, make_env=lambda: VaultChainEnv(max_steps=T))
    batch = rollout.stage_update(0, [0])
    env = VaultChainEnv(max_steps=T)
    env.reset(0)
    l1, l2 = env.game.vaults[0].length, env.game.vaults[1].length
    eps = 1e-6
    a1 = (1 / 3) / (math.sqrt(2 / 9) + eps)
    b2_adv = (-2 / 3) / (math.sqrt(2 / 9) + eps)
    a3 = 0.5 / (0.5 + eps)
    rounds_b0 = sum(v.length + 1 for v in env.game.vaults)  # the expert's 11 rounds
    samples = batch.samples
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0]
    # the advantage at the first token of each completion (make_sample fills the whole completion with it)
    per_round = [[s.advantages[i] for i, m in enumerate(s.loss_mask) if m and not s.loss_mask[i - 1]] for s in samples]
    assert per_round[0] == pytest.approx([a1] + [0.0] * l1 + [a3] + [0.0] * (rounds_b0 - l1 - 2))
    assert per_round[1] == pytest.approx([a1] + [0.0] * l1 + [-a3] * (l2 + 1))  # take, north x (l2-1), open: l2 + 1 rounds
    assert per_round[2] == pytest.approx([b2_adv] * (l1 + 1))
    assert a1 == pytest.approx(1 / math.sqrt(2), abs=1e-5) and b2_adv == pytest.approx(-math.sqrt(2), abs=1e-5)
    assert batch.metrics["stages/entered_mean"] == pytest.approx((6 + 3 + 1) / 3)  # V sums: 6, 3, 1
    assert batch.metrics["stages/completed_mean"] == pytest.approx((6 + 2 + 0) / 3)
    assert batch.metrics["rollout/success_rate"] == pytest.approx(1 / 3)
    assert batch.metrics["actor/degenerate_group_rate"] == 0.0


def test_temporal_grpo_needs_an_environment_with_milestones(monkeypatch):
    from tempo_plugin.envs import ENVS

    monkeypatch.setitem(ENVS, "plain", "tempo_plugin.envs.base:StepResult")  # a class without milestones
    with pytest.raises(ConfigError, match=r"--env plain has none: add stage_count and stages_completed to its class, see tempo_plugin/envs/base.py$"):
        TempoConfig(advantage_estimator="temporal_grpo", env="plain").validate()
    for env in ("vaults", "vault", "textworld", "alfworld"):  # every registered environment has milestones
        assert TempoConfig(advantage_estimator="temporal_grpo", env=env).validate().env == env
    with pytest.raises(ConfigError, match="drop --task"):
        TempoConfig(advantage_estimator="temporal_grpo", task="countdown").validate()
    assert TempoConfig(advantage_estimator="temporal_grpo", warmup_updates=6, td_updates=32).validate().total_updates == 32  # no warm-up

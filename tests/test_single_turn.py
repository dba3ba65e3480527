"""Single-turn GRPO/PPO/TPPO on the embedded runtime (tempo_plugin/embedded/single_turn.py)."""

import json
import math

import pytest
import torch

from tempo_plugin.algorithms.tppo import value_bce_loss
from tempo_plugin.critic.value_model import value_model_from_policy
from tempo_plugin.config import TempoConfig, parse_config
from tempo_plugin.embedded.single_turn import (
    Response,
    actor_samples,
    critic_loss,
    critic_outputs,
    explained_variance,
    values_from_outputs,
)
from tempo_plugin.algorithms.grpo import grpo_advantages
from tempo_plugin.estimators import ESTIMATORS, NO_CRITIC


def test_grpo_advantages_by_hand():
    adv = grpo_advantages([1, 0, 0, 0, 1, 1, 1, 1], 4)
    std = math.sqrt(0.1875)  # population std of [1, 0, 0, 0]
    assert adv[:4] == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], rel=1e-5)
    assert adv[4:] == [0.0] * 4  # a group that agrees carries no signal


def test_explained_variance_by_hand():
    responses = [Response(0, [1], [2, 3], [0.0, 0.0], "", 1.0), Response(0, [1], [2], [0.0], "", 0.0)]
    # R per token: [1, 1, 0]. A constant V explains nothing, even when shifted
    assert explained_variance([torch.tensor([0.5, 0.5]), torch.tensor([0.5])], responses) == pytest.approx(0.0)
    # a perfect predictor explains everything
    assert explained_variance([torch.tensor([1.0, 1.0]), torch.tensor([0.0])], responses) == pytest.approx(1.0)
    # V = [1, 0 | 0]: residuals [0, 1, 0] have variance 2/9, R has variance 2/9 -> 0
    assert explained_variance([torch.tensor([1.0, 0.0]), torch.tensor([0.0])], responses) == pytest.approx(0.0)
    same = [Response(0, [1], [2], [0.0], "", 1.0)] * 2
    assert explained_variance([torch.tensor([0.3]), torch.tensor([0.9])], same) is None


def test_critic_losses():
    responses = [Response(0, [1], [2, 3], [0.0, 0.0], "", 1.0), Response(0, [1], [2], [0.0], "", 0.0)]
    outputs = [torch.tensor([0.0, math.log(3)]), torch.tensor([0.0])]
    expected = (value_bce_loss(outputs[0], 1.0) + value_bce_loss(outputs[1], 0.0)) / 2
    assert critic_loss("tppo", outputs, responses, []).item() == pytest.approx(expected.item())
    returns = [torch.tensor([1.0, 1.0]), torch.tensor([0.0])]
    # ppo: mean over responses of the per-token mean of (f - ret)^2 / 2 = ((1 + (1 - ln 3)^2) / 4 + 0) / 2
    assert critic_loss("ppo", outputs, responses, returns).item() == pytest.approx((1 + (1 - math.log(3)) ** 2) / 4 / 2)
    assert values_from_outputs("tppo", outputs[0]).tolist() == pytest.approx([0.5, 0.75])
    assert values_from_outputs("ppo", outputs[0]) is outputs[0]


def test_actor_samples_train_only_the_response():
    r = Response(3, [7, 8, 9], [10, 11], [-0.5, -0.25], "x", 1.0)
    (sample,) = actor_samples([r], [torch.tensor([0.2, -0.1])])
    assert sample.tokens == [7, 8, 9, 10, 11] and sample.loss_mask == [0, 0, 0, 1, 1]
    assert sample.old_logprobs == [0.0, 0.0, 0.0, -0.5, -0.25]
    assert sample.advantages == pytest.approx([0.0, 0.0, 0.0, 0.2, -0.1]) and sample.group == 3


def test_tppo_critic_learns_to_explain_the_reward(tiny_model):
    """The critic machinery alone: responses whose first token decides R; the TPPO critic's explained
    variance starts at 0 (zero head: V = 1/2 everywhere) and rises as it learns."""
    torch.manual_seed(0)
    critic = value_model_from_policy(tiny_model)
    optimizer = torch.optim.AdamW(critic.parameters(), lr=1e-3)
    prompt = [5, 6, 7]
    responses = [Response(i, prompt, [30 if i % 2 else 31, 20, 21], [0.0] * 3, "", float(i % 2)) for i in range(8)]
    history = []
    for _ in range(30):
        outputs = critic_outputs(critic, responses, pad_id=0)
        history.append(explained_variance([values_from_outputs("tppo", f.detach()) for f in outputs], responses))
        loss = critic_loss("tppo", outputs, responses, [])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert history[0] == pytest.approx(0.0, abs=1e-6)
    # V_t is the value of the prefix before token t, so the first response token's value cannot see
    # the decisive token and the other two can: a perfect critic explains 2/3 of the variance
    assert history[-1] == pytest.approx(2 / 3, abs=0.02), history
    assert history[3] > history[1] > history[0], history


def test_config_choices_and_errors():
    cfg = parse_config(["--advantage-estimator", "tppo", "--task", "countdown", "--lambd", "0.9"])
    assert (cfg.advantage_estimator, cfg.task, cfg.lambd, cfg.gamma) == ("tppo", "countdown", 0.9, 1.0)
    with pytest.raises(SystemExit):
        parse_config(["--advantage-estimator", "a2c"])
    with pytest.raises(Exception, match="--gamma and --lambd"):
        TempoConfig(lambd=1.5).validate()


@pytest.mark.parametrize("estimator", ["tppo", "ppo", "grpo", "bpco", "easyppo", "sao", "flash_reinforce"])
def test_short_run_end_to_end(estimator, tmp_path, monkeypatch):
    """The trainer CLI on the tiny Countdown model (short bootstrap): outputs and metrics exist."""
    from tempo_plugin import train

    monkeypatch.setenv("TEMPO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    # --task: single-turn (grpo without --task is multi-turn GRPO on --env)
    code = train.main(["--advantage-estimator", estimator, "--task", "countdown", "--bootstrap-steps", "5", "--states-per-batch", "2",
                       "--branches", "2", "--warmup-updates", "1", "--td-updates", "2", "--max-assistant-tokens", "8",
                       "--eval-games", "4", "--out", str(out)])
    assert code == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    updates = records[1:-1]
    assert records[0]["phase"] == records[-1]["phase"] == "eval"
    if ESTIMATORS[estimator].critic == NO_CRITIC:  # no critic: no critic-only updates, no critic metrics
        assert [r["phase"] for r in updates] == ["train", "train"]
        assert all("critic/value_mean" not in r for r in updates)
    else:
        assert [r["phase"] for r in updates] == ["warmup", "train", "train"]
        loss_key = "critic/bce" if estimator == "tppo" else "critic/mse"
        assert all({"critic/value_mean", loss_key} <= set(r) for r in updates)
        assert "train/loss" not in updates[0]  # the warm-up trains the critic only
    assert all({"rollout/accuracy", "actor/adv_mean", "train/loss"} <= set(r) for r in updates if r["phase"] == "train")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval/accuracy"]["span"] == "base -> final"
    assert (out / "curves.png").is_file() and (out / "policy" / "config.json").is_file()
    assert (out / "critic" / "critic.safetensors").is_file() == (ESTIMATORS[estimator].critic != NO_CRITIC)


def test_micro_batched_critic_update_equals_one_batch(tiny_model):
    import copy

    from tempo_plugin.embedded.single_turn import critic_update, micro_batches

    torch.manual_seed(0)
    critic = value_model_from_policy(tiny_model, init="small", std=0.05)
    twin = copy.deepcopy(critic)
    responses = [Response(i, [5, 6, 7], [20 + i] * (i + 1), [0.0] * (i + 1), "", float(i % 2)) for i in range(3)]
    # sequences of 4, 5 and 6 tokens: a budget of 10 padded tokens fits [r0, r1] (2 x 5) and then [r2]
    assert [len(c) for c in micro_batches(responses, 10)] == [2, 1]
    assert [len(c) for c in micro_batches(responses, 4)] == [1, 1, 1]  # a single long sequence is never split
    returns = [torch.full((len(r.response_ids),), r.reward) for r in responses]
    before = critic.head.weight.detach().clone()
    whole = critic_update(critic, torch.optim.SGD(critic.parameters(), lr=0.1), "tppo", [responses], returns, 0, 1e9)
    split = critic_update(twin, torch.optim.SGD(twin.parameters(), lr=0.1), "tppo", micro_batches(responses, 4), returns, 0, 1e9)
    assert split == pytest.approx(whole, rel=1e-5)
    for p, q in zip(critic.parameters(), twin.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert not torch.allclose(critic.head.weight, before)  # the step did move the critic


def test_critic_epochs_are_repeated_steps_on_the_same_batch(tiny_model):
    """--critic-epochs E: E optimiser steps on one batch, the same as E one-step updates in a row;
    the reported loss is the first step's (before this batch trained the critic)."""
    import copy

    from tempo_plugin.embedded.single_turn import critic_update

    torch.manual_seed(0)
    critic = value_model_from_policy(tiny_model, init="small", std=0.05)
    twin = copy.deepcopy(critic)
    responses = [Response(i, [5, 6, 7], [20 + i] * (i + 1), [0.0] * (i + 1), "", float(i % 2)) for i in range(3)]
    returns = [torch.full((len(r.response_ids),), r.reward) for r in responses]
    twice = critic_update(critic, torch.optim.SGD(critic.parameters(), lr=0.01), "tppo", [responses], returns, 0, 1e9, epochs=2)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.01)
    first = critic_update(twin, twin_optimizer, "tppo", [responses], returns, 0, 1e9)
    second = critic_update(twin, twin_optimizer, "tppo", [responses], returns, 0, 1e9)
    assert twice == pytest.approx(first, rel=1e-6)
    assert second != pytest.approx(first)  # the second step starts from the critic the first step moved
    for p, q in zip(critic.parameters(), twin.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    with pytest.raises(Exception, match="--critic-epochs must be >= 1"):
        TempoConfig(critic_epochs=0).validate()

"""The scalar (PPO/TPPO) critic saved by single-turn runs: save/load round trip, and
analysis/mc_critic on a single-turn run (states every k answer tokens, the scalar critic's value)."""

import copy
import json

import pytest
import torch
import yaml

from tempo_plugin.algorithms.tppo import reconstruct_values
from tempo_plugin.critic.value_model import (
    critic_estimator,
    load_value_model,
    save_value_model,
    token_increments,
    value_model_from_policy,
)
from tempo_plugin.config import TempoConfig
from tempo_plugin.runs import resolve_run

from analysis.mc_critic import cli
from analysis.mc_critic.critics import ScalarCritic
from analysis.mc_critic.states import State


pytestmark = pytest.mark.usefixtures("one_thread")


def small_critic(policy, seed=0):
    torch.manual_seed(seed)
    return value_model_from_policy(policy, init="small", std=0.05)


def test_save_load_round_trip(tiny_model, tmp_path):
    critic = small_critic(tiny_model)
    with torch.no_grad():  # a trained critic's backbone differs from the policy's
        next(critic.backbone.parameters()).add_(0.01)
    save_value_model(critic, tmp_path / "critic", "tppo")
    assert json.loads((tmp_path / "critic" / "critic.json").read_text()) == {"estimator": "tppo", "hidden_size": 256}
    assert critic_estimator(tmp_path / "critic") == "tppo"
    policy = copy.deepcopy(tiny_model)
    loaded = load_value_model(tmp_path / "critic", policy)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    attention = torch.ones_like(ids)
    with torch.no_grad():
        assert torch.equal(critic(ids, attention), loaded(ids, attention))
    assert all(torch.equal(p, q) for p, q in zip(policy.parameters(), tiny_model.parameters()))  # policy untouched
    with pytest.raises(ValueError, match="one of ppo, bpco, easyppo, sao, tppo, got .grpo."):
        save_value_model(critic, tmp_path / "bad", "grpo")
    (tmp_path / "critic" / "critic.json").write_text(json.dumps({"estimator": "tppo", "hidden_size": 64}))
    with pytest.raises(ValueError, match="hidden size 64"):
        load_value_model(tmp_path / "critic", policy)


def test_scalar_critic_values_match_training(tiny_model):
    """TPPO: the value at prompt + k answer tokens is V_{k+1} of single_turn's reconstruction; PPO:
    the head output there."""
    critic = small_critic(tiny_model)
    prompt, answer = [5, 6, 7, 8], [9, 10, 11, 12, 13]
    with torch.no_grad():
        ids = torch.tensor([prompt + answer])
        increments = token_increments(critic, ids, torch.ones_like(ids))[0, len(prompt):]
        expected = reconstruct_values(increments)  # V_t of answer token t (the value before it)
        raw = critic(ids, torch.ones_like(ids))[0]
    states = [State(id=f"t{k}", trajectory="p", order=k, position=k, prompt_ids=prompt, response_ids=answer[:k])
              for k in range(len(answer))]
    tppo = ScalarCritic("tppo", critic, "tppo", pad_id=0, identity="x").evaluate(states, seed=0)
    assert [r["value"] for r in tppo] == pytest.approx(expected.tolist(), abs=1e-5)
    ppo = ScalarCritic("ppo", critic, "ppo", pad_id=0, identity="x").evaluate(states, seed=0)
    assert [r["value"] for r in ppo] == pytest.approx(raw[len(prompt) - 1:-1].tolist(), abs=1e-5)


def single_turn_run(path, policy, tokenizer, estimator, seed):
    policy.save_pretrained(path / "policy")
    tokenizer.save_pretrained(path / "policy")
    save_value_model(small_critic(policy, seed), path / "critic", estimator)
    cfg = TempoConfig(advantage_estimator=estimator, task="countdown", max_assistant_tokens=6)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    return path


def test_single_turn_end_to_end(tiny_model, tokenizer, tmp_path, capsys):
    run = single_turn_run(tmp_path / "tppo", tiny_model, tokenizer, "tppo", seed=0)
    other = single_turn_run(tmp_path / "ppo", tiny_model, tokenizer, "ppo", seed=1)
    assert resolve_run(run).critic_dir == run / "critic"
    out = tmp_path / "out"
    argv = [str(run), "--out", str(out), "--games", "2", "--every-tokens", "2", "--mc-samples", "2",
            "--critic-model", str(other)]
    assert cli.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "single_turn" and set(summary["critics"]) == {"tppo", "ppo:ppo"}
    assert summary["critics"]["tppo"]["n"] == summary["states"] > 0
    assert {r["position"] for r in summary["critics"]["tppo"]["by_position"]} <= {0, 2, 4}
    assert summary["action_states"] == 0 and not (out / "action_ranking.png").exists()
    assert (out / "calibration.png").is_file() and (out / "error_vs_position.png").is_file()
    # a single-turn GRPO run has no critic
    grpo = tmp_path / "grpo"
    tiny_model.save_pretrained(grpo / "policy")
    tokenizer.save_pretrained(grpo / "policy")
    (grpo / "config.yaml").write_text(yaml.safe_dump(TempoConfig(advantage_estimator="grpo", task="countdown").to_dict()))
    capsys.readouterr()
    assert cli.main([str(grpo), "--out", str(tmp_path / "o2")]) == 2
    assert "no critic to measure" in capsys.readouterr().err

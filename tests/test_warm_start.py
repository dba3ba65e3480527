"""``--warm-start-steps``: a real model directory gets N supervised steps on the game's noisy expert
demonstrations before RL, once; the result is cached and the run trains on it (with LoRA: the
adapters name the warm-started folder as their base)."""

import json

import pytest
import torch

from tempo_plugin.embedded import model as model_module
from tempo_plugin.embedded.model import load_policy, warm_start_cache_dir
from tempo_plugin.config import ConfigError, parse_config


@pytest.fixture()
def model_dir(tmp_path, tiny_model, tokenizer):
    path = tmp_path / "plain-model"
    tiny_model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_warm_start_trains_the_blocks_once_and_caches_them(tmp_path, model_dir, monkeypatch, one_thread):
    from transformers import AutoModelForCausalLM

    args = ["--model", str(model_dir), "--warm-start-steps", "2", "--cache-dir", str(tmp_path / "cache"),
            "--max-episode-steps", "15", "--macro-rounds", "5"]
    cfg = parse_config(args)
    steps = []
    model, _ = load_policy(cfg, torch.device("cpu"), progress=lambda step, loss: steps.append((step, loss)))
    assert [s for s, _ in steps] == [0, 1] and all(loss > 0 for _, loss in steps)
    cache = warm_start_cache_dir(cfg)
    assert json.loads((cache / "warm_start.json").read_text())["steps"] == 2
    before = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    after = model.state_dict()
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert any("layers.0.self_attn" in name for name in changed)  # the blocks trained
    assert not any("embed_tokens" in name or "lm_head" in name for name in changed)  # the vocabulary did not
    assert model.name_or_path == str(cache)  # what LoRA adapters record as their base

    monkeypatch.setattr("tempo_plugin.tiny.bootstrap.supervised_bootstrap",
                        lambda *a, **k: pytest.fail("warm-started twice"))
    again, _ = load_policy(cfg, torch.device("cpu"))
    assert all(torch.equal(t, again.state_dict()[n]) for n, t in after.items())
    # another step count, seed or model is another cache entry
    assert warm_start_cache_dir(parse_config(args[:3] + ["3"] + args[4:])) != cache
    assert warm_start_cache_dir(parse_config(args + ["--seed", "1"])) != cache
    # --warm-start-seed: RL seeds that share one warm start; its own seed is the key
    shared = [warm_start_cache_dir(parse_config(args + ["--seed", str(s), "--warm-start-seed", "0"])) for s in (0, 1, 2)]
    assert shared == [cache] * 3
    assert warm_start_cache_dir(parse_config(args + ["--warm-start-seed", "1"])) == \
        warm_start_cache_dir(parse_config(args + ["--seed", "1"]))


def test_a_warm_start_seed_makes_the_same_weights_whatever_the_rl_seed(tmp_path, model_dir, one_thread):
    """Built from scratch in two caches: --seed 1 --warm-start-seed 0 trains exactly what --seed 0
    does, and --seed 1 alone something else."""
    args = ["--model", str(model_dir), "--warm-start-steps", "2", "--max-episode-steps", "15", "--macro-rounds", "5"]
    built = {}
    for name, extra in (("seed0", ["--seed", "0"]), ("seed1-shared", ["--seed", "1", "--warm-start-seed", "0"]),
                        ("seed1", ["--seed", "1"])):
        model, _ = load_policy(parse_config(args + extra + ["--cache-dir", str(tmp_path / name)]), torch.device("cpu"))
        built[name] = model.state_dict()
    assert all(torch.equal(t, built["seed1-shared"][n]) for n, t in built["seed0"].items())
    assert not all(torch.equal(t, built["seed1"][n]) for n, t in built["seed0"].items())


def test_warm_start_is_for_environments_only(tmp_path, model_dir):
    cfg = parse_config(["--model", str(model_dir), "--warm-start-steps", "2", "--advantage-estimator", "grpo",
                        "--task", "letters", "--cache-dir", str(tmp_path)])
    with pytest.raises(ConfigError, match="single-turn"):
        model_module.load_warm_started(cfg, torch.device("cpu"))


def test_negative_warm_start_steps_name_the_flag():
    with pytest.raises(ConfigError, match="--warm-start-steps must be >= 0"):
        parse_config(["--warm-start-steps", "-1"])
    with pytest.raises(ConfigError, match="--warm-start-seed must be >= 0, or -1 for --seed"):
        parse_config(["--warm-start-seed", "-2"])


def test_the_bootstrap_schedule_ramps_then_decays():
    from tempo_plugin.tiny.bootstrap import lr_factor

    # the tiny bootstrap's 20-step ramp over a 12-step run: (s + 1) / 20 * (1 - s / 12), never above 0.18
    assert lr_factor(0, 12, 20) == pytest.approx(0.05)
    assert lr_factor(5, 12, 20) == pytest.approx(0.3 * 7 / 12)
    assert max(lr_factor(s, 12, 20) for s in range(12)) == pytest.approx(0.35 * 6 / 12)
    # the warm start's 2-step ramp: half the peak, then the decay (floor 0.05)
    assert lr_factor(0, 12, model_module.WARM_START_RAMP) == pytest.approx(0.5)
    assert lr_factor(1, 12, model_module.WARM_START_RAMP) == pytest.approx(11 / 12)
    assert lr_factor(11, 12, model_module.WARM_START_RAMP) == pytest.approx(1 / 12)
    assert lr_factor(199, 200, 20) == pytest.approx(0.05)

"""--critic-weights separate: the generative critic on its own copy of the weights, with its own
optimiser, so that critic training cannot move the actor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tempo_plugin.config import ConfigError, TempoConfig
from tempo_plugin.rollout.samples import ACTOR, CRITIC, VALUE, make_sample


class Recorder:
    """A stand-in trainer that records the roles of each step's samples."""

    def __init__(self, loss: float):
        self.steps: list[list[str]] = []
        self.loss = loss

    def step(self, samples):
        self.steps.append(sorted(s.role for s in samples))
        if not samples:
            return {"train/loss": 0.0, "train/skipped": 1.0}
        return {"train/loss": self.loss, "train/value_loss": self.loss / 2, "train/grad_norm": 2 * self.loss}


def sample(role: str):
    return make_sample([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], 0.5, role, 0, 0.0)


def test_the_actor_and_the_critic_train_their_own_samples():
    from tempo_plugin.embedded.multi_turn import train_step

    actor, critic = Recorder(1.0), Recorder(3.0)
    metrics = train_step(actor, [sample(ACTOR), sample(CRITIC), sample(VALUE), sample(ACTOR)], 3, critic)
    assert actor.steps == [["actor", "actor"]]  # one step, the actor's samples only
    # the critic's first step on all its samples, then the value cross-entropy alone
    assert critic.steps == [["critic", "value"], ["value"], ["value"]]
    # the actor's step's metrics; the critic's first step's under train/critic/, its value loss as it is
    assert metrics == {"train/loss": 1.0, "train/value_loss": 1.5, "train/grad_norm": 2.0,
                       "train/critic/loss": 3.0, "train/critic/grad_norm": 6.0}

    actor, critic = Recorder(1.0), Recorder(3.0)
    metrics = train_step(actor, [sample(CRITIC), sample(CRITIC)], 2, critic)  # a critic-only update
    assert actor.steps == [[]] and metrics["train/skipped"] == 1.0
    assert critic.steps == [["critic", "critic"], ["critic", "critic"]]  # the sampled critic repeats its samples


def test_only_tempo_has_a_separate_critic():
    TempoConfig(critic_weights="separate").validate()
    with pytest.raises(ConfigError, match="--critic-weights separate: temporal_grpo has no generative critic"):
        TempoConfig(critic_weights="separate", advantage_estimator="temporal_grpo").validate()
    with pytest.raises(ConfigError, match="--critic-weights must be one of shared, separate"):
        TempoConfig(critic_weights="both").validate()


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_with_a_separate_critic(tmp_path, capsys):
    """(The expected critic: it trains in every update, whatever its answers.) The critic-only warm-up leaves the actor's weights exactly as bootstrapped and trains the
    critic's copy; the checkpoint keeps the critic (weights, tokenizer, optimiser) apart, --resume
    continues with it, and the tools find it."""
    from tempo_plugin.embedded.model import resolve_device
    from tempo_plugin.embedded.run_folder import generative_critic_model
    from tempo_plugin.metrics import read_metrics
    from tempo_plugin.runs import GENERATIVE_CRITIC_DIR, resolve_run
    from tempo_plugin.train import main

    out, cache = tmp_path / "run", tmp_path / "cache"
    common = ["--bootstrap-steps", "3", "--warmup-updates", "1", "--warmup-games-per-batch", "1", "--branches", "2",
              "--critic-samples", "2", "--states-per-batch", "2", "--eval-games", "0", "--max-assistant-tokens", "8",
              "--vaults", "1", "--max-episode-steps", "15", "--critic-weights", "separate", "--critic-learning-rate", "1e-3", "--critic-value", "expected",
              "--cache-dir", str(cache), "--out", str(out)]
    assert main(common + ["--td-updates", "0"]) == 0
    latest = out / "checkpoints" / "latest"
    critic_dir = latest / GENERATIVE_CRITIC_DIR
    (bootstrapped,) = [p.parent for p in cache.glob("tiny-*/model.safetensors")]
    warmup = [r for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "warmup"][0]
    assert warmup["train/skipped"] == 1.0 and warmup["train/critic/loss"] != 0.0
    assert same(weights(latest), weights(bootstrapped))  # the actor never moved
    assert not same(weights(critic_dir), weights(bootstrapped))  # the critic did
    assert (critic_dir / "optimizer.pt").is_file() and (critic_dir / "tokenizer.json").is_file()
    assert resolve_run(out).generative_critic_dir == critic_dir

    cfg = TempoConfig(critic_weights="separate")
    policy = torch.nn.Linear(1, 1)  # what a missing critic folder would copy
    loaded = generative_critic_model(cfg, policy, latest, resolve_device("cpu"))
    assert same({k: v.contiguous() for k, v in loaded.state_dict().items() if k in weights(critic_dir)}, weights(critic_dir))

    capsys.readouterr()
    assert main(common + ["--td-updates", "1", "--resume"]) == 0
    assert "is missing" not in capsys.readouterr().err
    td = [r for r in read_metrics(out / "metrics.jsonl") if r["phase"] == "td"]
    assert len(td) == 1 and "train/critic/loss" in td[0]

    from tempo_plugin.embedded.checkpoint_integrity import checkpoint_damage

    assert checkpoint_damage(latest) == []
    torn = critic_dir / "model.safetensors"
    torn.write_bytes(torn.read_bytes()[:-100])  # the critic's weights cut short: the checkpoint is damaged
    (problem,) = checkpoint_damage(latest)
    assert problem.startswith(f"{torn} is damaged (cut short")

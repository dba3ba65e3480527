"""--preset reference: what it sets, and the four differences from the method that only it (or
their own settings) switch: endpoints valued 0, no round-0 warm-up states, the method's critic
prompt, the unclipped importance-sampling loss summed over tokens."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tempo_plugin.algorithms.losses import clipped_policy_loss, importance_sampling_loss
from tempo_plugin.config import PRESETS, ConfigError, TempoConfig, parse_config
from tempo_plugin.critic.prompt import REFERENCE_CRITIC_SYSTEM_PROMPT, condensed_transcript
from tempo_plugin.envs.chain import VaultChainEnv
from tempo_plugin.rollout.sampler import Completion
from tempo_plugin.rollout.samples import ACTOR, CRITIC
from tempo_plugin.updates.rollout import TempoRollout
from tests.test_start_states import T, Games, config

REFERENCE = {
    "critic_reward": "abs", "invalid_action_penalty": 0.0, "normalise_advantages": False, "critic_advantage_std": 0.0,
    "mc_refresh_every": 0, "audit_weight": 0.0, "critic_calibration": "none", "calibration_drift": False,
    "audit_boundaries": False,
    "critic_epochs": 1, "fresh_share": 0.0, "max_state_uses": 0, "prefix_is_clip": 0.0,
    "unvalued_endpoint": "zero", "warmup_start_states": False, "critic_prompt": "reference",
    "policy_loss": "importance_sampling",
}
"""The method as published, written out here by hand (docs/algorithms.md section 1.9)."""


def test_the_preset_sets_every_reference_value_and_nothing_else():
    assert PRESETS["reference"] == REFERENCE
    default, reference = parse_config([]).to_dict(), parse_config(["--preset", "reference"]).to_dict()
    changed = {k for k in default if default[k] != reference[k]}
    # prefix IS, the refresh, the calibration's drift and the audits' boundary states are off by default too
    assert changed == set(REFERENCE) - {"prefix_is_clip", "mc_refresh_every", "calibration_drift",
                                        "audit_boundaries"} | {"preset"}
    assert {k: reference[k] for k in REFERENCE} == REFERENCE


def test_explicit_settings_win_over_the_preset():
    cfg = parse_config(["--critic-epochs", "2", "--preset", "reference", "--critic-prompt", "condensed"])
    assert (cfg.critic_epochs, cfg.critic_prompt, cfg.critic_reward) == (2, "condensed", "abs")
    yaml_like = TempoConfig.from_dict({"preset": "reference", "fresh-share": 0.5})
    assert (yaml_like.fresh_share, yaml_like.policy_loss) == (0.5, "importance_sampling")


def test_an_unknown_preset_or_choice_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="preset 'published' is not a preset: choose one of reference"):
        TempoConfig.from_dict({"preset": "published"}, source="x.yaml")
    with pytest.raises(ConfigError, match="--policy-loss must be one of ppo, importance_sampling"):
        TempoConfig.from_dict({"policy_loss": "clip"})


# ------------------------------------------------------------------------------------------ loss

def test_importance_sampling_loss_sums_minus_ratio_times_advantage_over_tokens_by_hand():
    logprobs = torch.tensor([[0.0, -1.0, -2.0], [-0.5, -0.5, 0.0]])
    old = torch.tensor([[0.0, -1.0 - 0.6931472, -2.0], [-0.5, -0.5, 0.0]])  # token (0, 1): ratio 2
    advantages = torch.tensor([[9.0, 1.5, 1.5], [-2.0, -2.0, 7.0]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    out = importance_sampling_loss(logprobs, old, advantages, mask)
    # -(2 x 1.5) - (1 x 1.5) - (1 x -2) - (1 x -2) = -0.5; no clip (a PPO clip of 0.2 would cap 2 at 1.2)
    assert out.loss.item() == pytest.approx(-0.5, abs=1e-5)
    assert out.clip_fraction.item() == 0.0
    ppo = clipped_policy_loss(logprobs, old, advantages, mask)
    # per sample means over tokens, then the mean over samples: ((-1.2 x 1.5 - 1.5) / 2 + 2) / 2
    assert ppo.loss.item() == pytest.approx(((-1.2 * 1.5 - 1.5) / 2 + 2.0) / 2, abs=1e-5)


def test_trainer_sums_the_importance_sampling_loss_over_micro_batches(tiny_model, one_thread):
    from tempo_plugin.embedded.trainer import PolicyTrainer
    from tempo_plugin.rollout.samples import make_sample

    samples = [make_sample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], [0.0, 0.0, -1.0, -1.0, -1.0], 1.0, ACTOR, g, 1.0)
               for g in range(3)]
    sgd = lambda: torch.optim.SGD(tiny_model.parameters(), lr=0.0)  # noqa: E731
    whole = PolicyTrainer(tiny_model, sgd(), 0, policy_loss="importance_sampling").step(samples)
    split = PolicyTrainer(tiny_model, sgd(), 0, policy_loss="importance_sampling", tokens_per_micro_batch=5).step(samples)
    mean = PolicyTrainer(tiny_model, sgd(), 0).step(samples)
    # 3 equal samples of 3 tokens: the sum is 9 x the per-token loss, the PPO mean 1 x it
    assert whole["train/loss"] == pytest.approx(split["train/loss"], rel=1e-5)
    assert whole["train/loss"] == pytest.approx(9 * mean["train/loss"], rel=1e-4)


# ------------------------------------------------------------------------------------ the rollout

class Scripted:
    """Actors wait; critic prompts (either system prompt in the decoded prompt) get ``critic_text``."""

    def __init__(self, tokenizer, critic_text: str):
        self.tokenizer, self.critic_text = tokenizer, critic_text
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.counts: Counter[str] = Counter()
        self.critic_prompts: list[str] = []

    def generate(self, requests, params, seed):
        from tempo_plugin.critic import CRITIC_SYSTEM_PROMPT

        out = []
        for request in requests:
            prompt = self.tokenizer.decode(list(request.prompt_ids))
            critic = CRITIC_SYSTEM_PROMPT in prompt or REFERENCE_CRITIC_SYSTEM_PROMPT in prompt
            text = self.critic_text if critic else "<action>wait</action>"
            self.counts[CRITIC if critic else ACTOR] += 1
            if critic:
                self.critic_prompts.append(prompt)
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.im_end]
            out.append(Completion(ids, [-0.125] * len(ids), text, "stop"))
        return out


def rollout(tokenizer, protocol, critic_text, **settings):
    sampler = Scripted(tokenizer, critic_text)
    return TempoRollout(config(**settings), sampler, protocol, make_env=lambda: VaultChainEnv(max_steps=T)), sampler


@pytest.mark.parametrize("policy", ["drop", "zero"])
def test_an_endpoint_whose_critic_never_parses_is_dropped_or_valued_zero(tokenizer, protocol, policy):
    tempo, _ = rollout(tokenizer, protocol, "no idea", unvalued_endpoint=policy, fresh_share=1.0)
    batch = tempo.td_update(0, [], Games(100))
    m = batch.metrics
    # waiting never ends a macro-step early: all 4 x 2 branches reach an endpoint, none valued
    assert m["critic/endpoint_unvalued"] == 8.0
    if policy == "drop":
        assert m["td/dropped_groups"] == 4.0 and m["train/actor_samples"] == 0.0
    else:
        # each valued 0: R_n = 0 everywhere, G = 0, every group kept and degenerate (A_n = 0)
        assert m["td/dropped_groups"] == 0.0
        assert m["actor/value_target_mean"] == 0.0 and m["actor/degenerate_group_rate"] == 1.0


@pytest.mark.parametrize("start_states", [True, False])
def test_the_warm_up_values_round_zero_states_only_when_asked(tokenizer, protocol, start_states):
    tempo, sampler = rollout(tokenizer, protocol, "<value>0.40</value>", warmup_games_per_batch=1,
                             warmup_start_states=start_states)
    batch = tempo.warmup_update(0, [100])
    # a waiting policy loses both episodes at T = 30: 2 x 5 boundary states (rounds 5..25), + 1 round-0 state
    assert batch.metrics["warmup/boundary_states"] == (11.0 if start_states else 10.0)
    assert sampler.counts[CRITIC] == 2 * (11 if start_states else 10)


def test_the_reference_critic_prompt_holds_the_transcript_and_asks_for_reasoning(tokenizer, protocol):
    tempo, sampler = rollout(tokenizer, protocol, "<value>0.40</value>", critic_prompt="reference", fresh_share=1.0)
    tempo.td_update(0, [], Games(100))
    endpoint = next(p for p in sampler.critic_prompts if "Actor: " in p)
    assert REFERENCE_CRITIC_SYSTEM_PROMPT in endpoint and "Initial situation:" in endpoint
    # H = 5 rounds of waiting: 5 actor turns and 5 observations, none with its action list
    assert endpoint.count("Actor: <action>wait</action>") == 5 and endpoint.count("Environment: ") == 5
    assert "Actions:" not in endpoint.split("Actor:", 1)[1]  # only the initial situation keeps its action list
    assert "Reference (hidden from the agent):\nVault 1 opens only with the " in endpoint
    assert endpoint.index("Reference (hidden") < endpoint.index("Interaction so far:\nInitial situation:")


def test_condensed_transcript_by_hand():
    messages = (("system", "play"), ("user", "Task: x\nYou are in a room. Actions: north | wait"),
                ("assistant", "<action>north</action>"), ("user", "A hall. Actions: north | open vault"))
    assert condensed_transcript(messages) == (
        "Initial situation:\nTask: x\nYou are in a room. Actions: north | wait\n\n"
        "Actor: <action>north</action>\n\n"
        "Environment: A hall."
    )
    assert condensed_transcript((("system", "play"),)) == ""


AUDIT_METRICS = {"audit/branches", "audit/rounds", "audit/success_rate", "critic/ready", "critic/calibration_slope",
                 "critic/calibration_intercept"}
"""What the default's audits log in this short run (the Brier scores follow once AUDITS_MIN audits are in)."""


def test_a_reference_run_logs_the_same_metric_names_as_a_default_run(tmp_path):
    from tempo_plugin.metrics import read_metrics
    from tempo_plugin.train import main
    from tests.test_train_smoke import SMALL

    names = {}
    for label, extra in (("default", []), ("reference", ["--preset", "reference"])):
        out = tmp_path / label
        assert main(SMALL + [*extra, "--td-updates", "2", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 0
        records = read_metrics(out / "metrics.jsonl")
        assert [r["phase"] for r in records] == ["eval", "warmup", "td", "td", "eval"]
        names[label] = {phase: set().union(*(r for r in records if r["phase"] == phase)) for phase in ("warmup", "td", "eval")}
    # the default's audits (--audit-weight 1) add their metrics to the TD updates; nothing else differs
    assert names["default"]["td"] - names["reference"]["td"] == AUDIT_METRICS
    assert names["reference"] == {**names["default"], "td": names["default"]["td"] - AUDIT_METRICS}
    assert "critic/endpoint_unvalued" in names["default"]["td"] and "train/actor_samples" in names["default"]["td"]

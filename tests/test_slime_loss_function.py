"""TEMPO's samples and TPPO's critic through slime's own ``loss_function``, on CPU, with megatron-core's
real parallel state (gloo, world size 1, tensor / pipeline / context parallel 1), compared with this
project's losses on the same samples: the loss value, the gradient of every model parameter and the
gradient of the logits.

slime runs in a subprocess (tests/slime_loss_function_check.py), so the process group and the
``megatron.training`` stand-ins stay out of pytest; it prints one JSON line (how the parallel state
was set up) and saves the numbers. This module builds the samples and the tiny models, runs our
side (``PolicyTrainer`` of the local runtime, ``value_bce_loss`` of TPPO, hand formulas) and
compares.

Samples: one TEMPO TD update's worth: three actor branches of one start state (the saved prefix as
prompt with mask 0; a two-round segment with mask 1 on the actor's completions and 0 on the
closing / observation tokens in between) and two critic samples (critic prompt, mask 1 on the
completion), each with its one advantage; old log-probs = the model's own plus a fixed offset per
token of up to 0.5 nats, so both clip bounds (0.2 / 0.28) are hit. As slime's rollout builds them
(``tempo_plugin.slime.samples``): reward = the sample's advantage, no ``rollout_id`` (so
slime gives each sample a rollout id of its own and ``rollout_mask_sums`` = the sample's own mask
total), the response = everything from the first trained token.

Differences between slime's loss and ours that these tests measure (each asserted with its size):

- Normalisation. slime scales the sum of per-sample means by 1 / ``step_global_batch_size``, the
  number of samples in the step *including* TEMPO's padding samples (``remove_sample``: mask all 0);
  our trainer divides by the number of real samples. With n real and p padding samples slime's loss
  and gradients are n / (n + p) times ours.
- Old log-probs. Our trainer takes the sampler's log-probs as pi_old; slime does so only with
  ``--use-rollout-logprobs``. The recipes do not pass it, so slime recomputes pi_old with the
  training weights: the ratio is exactly 1 at the step's start, nothing clips, the loss is
  -(1/N) sum_i A_i (0 here: TEMPO's advantages sum to 0 per group) and the gradient that of our
  loss with pi_old := pi_theta.
- Entropy term. slime's loss is pg_loss - entropy_coef * (per-sample mean entropy); ours has none.
  The recipes set entropy_coef = 0.
- KL term. The recipes pass ``--use-kl-loss`` with coefficient 0 (low_var_kl, logged only): it adds
  exactly 0 to loss and gradient; with the reference = the start weights it reads 0.
- Reported metrics. slime's per-micro-batch metrics are sums of per-sample means (divided by the
  step's sample count when logged); ``pg_clipfrac`` is the mean over samples of each sample's clip
  fraction and ``ppo_kl`` the k1 estimate mean(log pi_old - log pi_theta), where our trainer reports
  a token-weighted clip fraction and the k3 estimate.
- Rollout grouping. Were several samples given one ``rollout_id``, slime would use the token mean
  over the whole rollout instead of per sample (measured on a hypothetical grouping).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.extras import HAVE_SLIME, needs_extra, needs_slime
import torch

from tempo_plugin.algorithms.losses import clipped_policy_loss
from tempo_plugin.algorithms.tppo import value_bce_loss
from tempo_plugin.rollout.samples import ACTOR, CRITIC, TrainSample, make_sample

ROOT = Path(__file__).resolve().parents[1]
pytestmark = needs_slime if not HAVE_SLIME else needs_extra("slime-test", "megatron.core")

EPS_LOW, EPS_HIGH = 0.2, 0.28  # the recipes' --eps-clip / --eps-clip-high
PAD_MULTIPLIER = 128  # slime's --data-pad-size-multiplier default
ACTOR_ADVANTAGES = [0.8, -0.5, -0.3]
CRITIC_ADVANTAGES = [0.6, -0.6]
TPPO_REWARDS = [1.0, 0.0, 1.0]
N_PADDING = 2
ENTROPY_COEF = 0.01


# --------------------------------------------------------------------------------------------------
# samples and models


def _offset(k: int) -> float:
    """The sampler's log-prob minus the model's at the k-th trained token: within +-0.5 nats."""
    return 0.5 * math.sin(1.7 * k + 0.3)


def _current_logprobs(model, tokens: list[int]) -> list[float]:
    from tempo_plugin.logprobs import token_logprobs

    ids = torch.tensor([tokens])
    with torch.no_grad():
        return token_logprobs(model, ids, torch.ones_like(ids), 1.0)[0].tolist()


def _with_old(sample: TrainSample, old: list[float]) -> TrainSample:
    return TrainSample(sample.tokens, sample.loss_mask, [o if m else 0.0 for o, m in zip(old, sample.loss_mask)],
                       sample.advantages, sample.role, sample.group, sample.reward)


def build_sequences(protocol) -> tuple[list[tuple[list[int], list[int]]], list[tuple[list[int], list[int]]]]:
    """(tokens, mask) of three actor branches sharing a start state's prefix, and of two critic samples."""
    prefix = protocol.render_prompt(protocol.initial_messages(
        "Take a key, walk north through 2 halls and open the vault.", "Key room 1 of 1. Keys: red, blue."))
    actor = []
    for first, obs, second in [("<action>take red key</action>", "Hall 1. Exits: north.", "<action>north</action>"),
                               ("<action>take blue key</action>", "Hall 1. Exits: north.", "<action>go north</action>"),
                               ("I look. <action>look</action>", "Key room 1 of 1. Keys: red, blue.",
                                "<action>take red</action>")]:
        c1 = protocol.encode(first) + [protocol.tokenizer.eos_token_id]
        c2 = protocol.encode(second) + [protocol.tokenizer.eos_token_id]
        between = protocol.closing_tokens(c1) + protocol.observation_tokens(obs)
        tail = protocol.closing_tokens(c2)
        tokens = prefix + c1 + between + c2 + tail
        mask = [0] * len(prefix) + [1] * len(c1) + [0] * len(between) + [1] * len(c2) + [0] * len(tail)
        actor.append((tokens, mask))
    critic = []
    for value in ("<value>7</value>", "<value>3</value>"):
        prompt = protocol.render_prompt([{"role": "user", "content": "Hall 1. Exits: north. Value?"}])
        completion = protocol.encode(value) + [protocol.tokenizer.eos_token_id]
        critic.append((prompt + completion, [0] * len(prompt) + [1] * len(completion)))
    return actor, critic


def tempo_samples(model, protocol) -> list[TrainSample]:
    actor, critic = build_sequences(protocol)
    samples, k = [], 0
    for (tokens, mask), adv, role in zip(actor + critic, ACTOR_ADVANTAGES + CRITIC_ADVANTAGES,
                                         [ACTOR] * len(actor) + [CRITIC] * len(critic)):
        current = _current_logprobs(model, tokens)
        sampler = []
        for lp, m in zip(current, mask):
            sampler.append(lp + _offset(k) if m else 0.0)
            k += m
        samples.append(make_sample(tokens, mask, sampler, adv, role, group=0, reward=1.0))
    return samples


def as_slime(sample: TrainSample, reward: float | None = None) -> dict:
    """What slime's train data holds of a TEMPO sample (tempo_plugin.slime.samples)."""
    if reward is None:
        reward = next(a for a, m in zip(sample.advantages, sample.loss_mask) if m)
    return {"tokens": sample.tokens, "prompt_length": sample.prompt_length, "loss_mask": sample.loss_mask,
            "logprobs": sample.old_logprobs, "reward": reward}


def padding(pad_id: int) -> dict:
    """A padding sample as ``samples.padding_sample`` makes it (slime zeroes its mask: remove_sample)."""
    return {"tokens": [pad_id, pad_id], "prompt_length": 1, "loss_mask": [0, 0], "logprobs": [0.0, 0.0], "reward": 0.0}


def response_mask_sum(sample: dict) -> float:
    return float(sum(sample["loss_mask"][sample["prompt_length"]:]))


@pytest.fixture(scope="module")
def setup(tokenizer, protocol, tmp_path_factory):
    from tempo_plugin.critic.value_model import value_model_from_policy
    from tempo_plugin.tiny.model import build_tiny_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = build_tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    critic = value_model_from_policy(policy, init="small", std=0.005)  # a trained-looking head: V away from 1/2
    policy.eval()
    samples = tempo_samples(policy, protocol)
    n = len(samples)
    slime_samples = [as_slime(s) for s in samples]
    own_sums = [response_mask_sum(s) for s in slime_samples]
    group_sums = [sum(own_sums[:3])] * 3 + [sum(own_sums[3:])] * 2
    recipe = {"use_rollout_logprobs": True}
    policy_cases = {
        "tempo": {"samples": slime_samples, "rollout_mask_sums": own_sums, "step_global_batch_size": n, "args": recipe},
        "padding": {"samples": slime_samples + [padding(tokenizer.pad_token_id)] * N_PADDING,
                    "rollout_mask_sums": own_sums + [0.0] * N_PADDING, "step_global_batch_size": n + N_PADDING,
                    "args": recipe},
        "recomputed_old": {"samples": slime_samples, "rollout_mask_sums": own_sums, "step_global_batch_size": n,
                           "args": {"use_rollout_logprobs": False}},
        "entropy": {"samples": slime_samples, "rollout_mask_sums": own_sums, "step_global_batch_size": n,
                    "args": {**recipe, "entropy_coef": ENTROPY_COEF}},
        "grouped": {"samples": slime_samples, "rollout_mask_sums": group_sums, "step_global_batch_size": n,
                    "args": recipe},
    }
    critic_samples = [as_slime(s, reward=r) for s, r in zip(samples[:3], TPPO_REWARDS)]
    critic_case = {
        "samples": critic_samples,
        "rollout_mask_sums": [response_mask_sum(s) for s in critic_samples],
        "step_global_batch_size": len(critic_samples),
        "args": {"advantage_estimator": "ppo", "loss_type": "value_loss", "gamma": 1.0, "lambd": 1.0, "kl_coef": 0.0,
                 "use_kl_loss": False},
    }
    path = tmp_path_factory.mktemp("slime_loss")
    torch.save({
        "model": {"vocab_size": len(tokenizer), "pad_id": tokenizer.pad_token_id, "eos_id": tokenizer.eos_token_id},
        "policy_state": policy.state_dict(), "critic_state": critic.state_dict(), "pad_multiplier": PAD_MULTIPLIER,
        "policy_cases": policy_cases, "critic_case": critic_case,
    }, path / "case.pt")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "slime_loss_function_check.py"),
                             str(path / "case.pt"), str(path / "out.pt")],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-5000:])
    info = json.loads(result.stdout.strip().splitlines()[-1])
    out = torch.load(path / "out.pt")
    yield {"info": info, "out": out, "policy": policy, "critic": critic, "samples": samples,
           "critic_samples": critic_samples, "policy_cases": policy_cases}
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------------
# our side


def trainer_step(policy, samples: list[TrainSample], pad_id: int) -> tuple[float, dict[str, torch.Tensor]]:
    """The local runtime's PolicyTrainer on ``samples``: its loss and the gradient it steps with
    (SGD with lr 0 and no effective clipping, so the weights stay as they are)."""
    from tempo_plugin.embedded.trainer import PolicyTrainer

    trainer = PolicyTrainer(policy, torch.optim.SGD(policy.parameters(), lr=0.0), pad_id,
                            eps_clip=EPS_LOW, eps_clip_high=EPS_HIGH, grad_clip=1e12)
    metrics = trainer.step(samples)
    policy.eval()
    grads = {n: p.grad.detach().clone() for n, p in policy.named_parameters() if p.grad is not None}
    policy.zero_grad(set_to_none=True)
    return metrics["train/loss"], grads


def response_rows(logits: torch.Tensor, cases_samples: list[dict]):
    """Per sample: the logits rows that predict its response tokens (slime's cp-1 layout) and those tokens."""
    rows, end = [], 0
    for s in cases_samples:
        end += len(s["tokens"])
        start = end - (len(s["tokens"]) - s["prompt_length"])
        rows.append((logits[0, start - 1 : end - 1], torch.tensor(s["tokens"][s["prompt_length"]:])))
    return rows


def our_loss_on_logits(logits: torch.Tensor, samples: list[dict], old_key: str = "logprobs",
                       old: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``clipped_policy_loss`` on log-probs taken from the packed logits; returns (loss, d loss / d logits)."""
    leaf = logits.clone().requires_grad_(True)
    logps, olds, advs, masks = [], [], [], []
    for i, ((rows, targets), s) in enumerate(zip(response_rows(leaf, samples), samples)):
        p = s["prompt_length"]
        logps.append(torch.log_softmax(rows, -1).gather(-1, targets[:, None]).squeeze(-1))
        olds.append(torch.tensor(s[old_key][p:]) if old is None else old[i])
        masks.append(torch.tensor(s["loss_mask"][p:], dtype=torch.float32))
        advs.append(masks[-1] * s["reward"])
    pad = lambda xs: torch.nn.utils.rnn.pad_sequence(xs, batch_first=True)  # noqa: E731
    out = clipped_policy_loss(pad(logps), pad(olds), pad(advs), pad(masks), EPS_LOW, EPS_HIGH)
    out.loss.backward()
    return out.loss.detach(), leaf.grad


def assert_grads_close(theirs: dict, ours: dict, scale: float = 1.0, rtol: float = 2e-4, atol: float = 1e-7) -> float:
    assert theirs.keys() == ours.keys()
    worst = 0.0
    for name in ours:
        torch.testing.assert_close(theirs[name], ours[name] * scale, rtol=rtol, atol=atol, msg=name)
        worst = max(worst, float((theirs[name] - ours[name] * scale).abs().max()))
    return worst


def entropy_term(logits: torch.Tensor, samples: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_i mean_t H_t over the loss tokens (slime's entropy_loss before / N) and its logits gradient."""
    leaf = logits.clone().requires_grad_(True)
    total = leaf.new_zeros(())
    for (rows, _), s in zip(response_rows(leaf, samples), samples):
        mask = torch.tensor(s["loss_mask"][s["prompt_length"]:], dtype=torch.float32)
        logp = torch.log_softmax(rows, -1)
        h = -(logp.exp() * logp).sum(-1)
        total = total + (h * mask).sum() / mask.sum().clamp_min(1)
    total.backward()
    return total.detach(), leaf.grad


# --------------------------------------------------------------------------------------------------
# tests


def test_slime_ran_on_the_real_megatron_parallel_state(setup):
    info = setup["info"]
    assert "failure" not in info, info.get("failure")
    assert info["real_parallel_state"] and info["slime_mpu_is_parallel_state"] and info["slime_mpu_is_ours"]
    assert info["backend"] == "gloo" and info["world_size"] == 1
    assert info["tp_world_size"] == info["tp_group_size"] == info["pp_world_size"] == info["cp_world_size"] == 1
    assert info["dp_cp_world_size"] == 1 and info["pipeline_last_stage"]
    assert info["value_loss_was_slimes"] and info["value_loss_patched"] and "critic_init_failure" not in info
    assert info["compiled_graphs"] > 0  # compute_policy_loss / compute_approx_kl ran through torch.compile


def test_tempo_samples_policy_loss_equals_our_trainer(setup, tokenizer):
    """``--use-rollout-logprobs``, recipe clip bounds, KL coefficient 0, entropy 0, each sample its own
    rollout: slime's scaled loss = our trainer's loss (mean over samples of the per-sample token mean
    of the clipped surrogate), and the parameter and logits gradients agree."""
    res, samples = setup["out"]["policy"]["tempo"], setup["samples"]
    n = len(samples)
    ours, our_grads = trainer_step(setup["policy"], samples, tokenizer.pad_token_id)
    assert res["loss"].item() == pytest.approx(ours, rel=1e-5, abs=1e-7)
    assert res["metrics"]["pg_loss"] == pytest.approx(n * ours, rel=1e-5, abs=1e-7)  # per-mb sum of sample means
    assert res["metrics"]["kl_loss"] == pytest.approx(0.0, abs=1e-6)  # reference = start weights, weight 0
    assert torch.equal(res["normalizer"], torch.tensor(1))
    assert_grads_close(res["param_grads"], our_grads)

    # the same comparison on slime's own logits: slime's vocab-parallel log-prob (gloo all-reduce over
    # the real TP group) against log_softmax, and the gradient slime's backward hands the model
    case = setup["policy_cases"]["tempo"]["samples"]
    loss, grad = our_loss_on_logits(res["logits"], case)
    assert res["loss"].item() == pytest.approx(loss.item(), rel=1e-6, abs=1e-8)
    torch.testing.assert_close(res["logits_grad"], grad, rtol=1e-5, atol=1e-9)
    assert res["logits_grad"][0, -res["pad"]:].abs().max() == 0  # the padding run gets no gradient

    # slime's advantages: the reward (= TEMPO's advantage) on every response token
    for adv, s in zip(res["advantages"], case):
        assert torch.all(adv == s["reward"])


def test_reported_metrics_differ_in_aggregation(setup):
    """slime: sum over samples of per-sample means; pg_clipfrac per sample, ppo_kl = k1. Ours: token
    means over the batch, approx_kl = k3. Both computed here from slime's logits."""
    res, case = setup["out"]["policy"]["tempo"], setup["policy_cases"]["tempo"]["samples"]
    clip_per_sample, k1_per_sample, abs_diff, tokens_clipped, tokens = [], [], [], 0.0, 0.0
    for (rows, targets), s in zip(response_rows(res["logits"], case), case):
        p = s["prompt_length"]
        logp = torch.log_softmax(rows, -1).gather(-1, targets[:, None]).squeeze(-1)
        old, mask = torch.tensor(s["logprobs"][p:]), torch.tensor(s["loss_mask"][p:], dtype=torch.float32)
        ratio, adv = (logp - old).exp(), s["reward"]
        clipped = (-ratio.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * adv > -ratio * adv).float()
        clip_per_sample.append(float((clipped * mask).sum() / mask.sum()))
        k1_per_sample.append(float(((old - logp) * mask).sum() / mask.sum()))
        abs_diff.append(float(((logp - old).abs() * mask).sum() / mask.sum()))
        tokens_clipped += float((clipped * mask).sum())
        tokens += float(mask.sum())
    assert 0 < sum(clip_per_sample) < len(case)  # both clipped and unclipped tokens
    assert res["metrics"]["pg_clipfrac"] == pytest.approx(sum(clip_per_sample), rel=1e-5)
    assert res["metrics"]["ppo_kl"] == pytest.approx(sum(k1_per_sample), rel=1e-4, abs=1e-6)
    assert res["metrics"]["train_rollout_logprob_abs_diff"] == pytest.approx(sum(abs_diff), rel=1e-5)
    # our trainer's clip fraction is token-weighted: not the logged sample mean
    assert abs(tokens_clipped / tokens - sum(clip_per_sample) / len(case)) > 1e-3


def test_padding_samples_scale_slimes_loss_by_real_over_all(setup, tokenizer):
    """TEMPO pads every rollout to a fixed count with remove_sample samples (mask 0). slime divides by
    all of them (step_global_batch_size), our trainer never sees them: slime = n / (n + p) x ours."""
    res, samples = setup["out"]["policy"]["padding"], setup["samples"]
    n = len(samples)
    ours, our_grads = trainer_step(setup["policy"], samples, tokenizer.pad_token_id)
    scale = n / (n + N_PADDING)
    assert res["loss"].item() == pytest.approx(scale * ours, rel=1e-5, abs=1e-7)
    assert res["loss"].item() == pytest.approx(scale * setup["out"]["policy"]["tempo"]["loss"].item(), rel=1e-6)
    assert_grads_close(res["param_grads"], our_grads, scale=scale)


def test_recomputed_old_logprobs_give_ratio_one(setup, tokenizer):
    """slime's default (the recipes: no --use-rollout-logprobs): pi_old = slime's own log-prob pass on
    the training weights, so ratio = 1, nothing clips, loss = -(1/N) sum_i A_i, and the gradient is our
    trainer's with pi_old := pi_theta; it differs from the sampler-pi_old loss by the clipping."""
    res, samples = setup["out"]["policy"]["recomputed_old"], setup["samples"]
    n = len(samples)
    assert res["loss"].item() == pytest.approx(-sum(ACTOR_ADVANTAGES + CRITIC_ADVANTAGES) / n, abs=1e-6)
    assert res["metrics"]["pg_clipfrac"] == 0.0
    assert res["metrics"]["ppo_kl"] == pytest.approx(0.0, abs=1e-6)
    on_policy = [_with_old(s, _current_logprobs(setup["policy"], s.tokens)) for s in samples]
    ours, our_grads = trainer_step(setup["policy"], on_policy, tokenizer.pad_token_id)
    assert res["loss"].item() == pytest.approx(ours, rel=1e-5, abs=1e-6)
    assert_grads_close(res["param_grads"], our_grads)
    # slime's recomputed log-probs are the policy's own (what our trainer computes)
    for lp, s in zip(res["recomputed_log_probs"], on_policy):
        want = torch.tensor(_current_logprobs(setup["policy"], s.tokens)[s.prompt_length:])
        torch.testing.assert_close(lp, want, rtol=1e-5, atol=2e-5)
    tempo = setup["out"]["policy"]["tempo"]
    assert abs(res["loss"].item() - tempo["loss"].item()) > 1e-3  # the sampler-pi_old loss clips


def test_entropy_coefficient_subtracts_the_mean_entropy(setup):
    """entropy_coef c: slime = ours - c (1/N) sum_i mean_t H_it, in value and logits gradient."""
    res, tempo = setup["out"]["policy"]["entropy"], setup["out"]["policy"]["tempo"]
    case = setup["policy_cases"]["entropy"]["samples"]
    n = len(case)
    h_sum, h_grad = entropy_term(res["logits"], case)
    assert res["metrics"]["entropy_loss"] == pytest.approx(h_sum.item(), rel=1e-5)
    assert res["loss"].item() == pytest.approx(tempo["loss"].item() - ENTROPY_COEF * h_sum.item() / n, rel=1e-5)
    torch.testing.assert_close(res["logits_grad"], tempo["logits_grad"] - ENTROPY_COEF / n * h_grad,
                               rtol=1e-5, atol=1e-9)


def test_shared_rollout_id_would_take_the_token_mean_over_the_rollout(setup):
    """Hypothetical: the three actor samples in one rollout, the two critic samples in another.
    slime's reducer divides by the rollout's mask total: (1/N) sum_r sum_{i in r} sum_t l_it / M_r,
    a token-weighted mean per rollout instead of our per-sample mean."""
    res = setup["out"]["policy"]["grouped"]
    case = setup["policy_cases"]["grouped"]["samples"]
    n = len(case)
    per_sample_sum, masks = [], []
    for (rows, targets), s in zip(response_rows(res["logits"], case), case):
        p = s["prompt_length"]
        logp = torch.log_softmax(rows, -1).gather(-1, targets[:, None]).squeeze(-1)
        ratio, adv = (logp - torch.tensor(s["logprobs"][p:])).exp(), s["reward"]
        mask = torch.tensor(s["loss_mask"][p:], dtype=torch.float32)
        per_token = torch.maximum(-ratio * adv, -ratio.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * adv)
        per_sample_sum.append(float((per_token * mask).sum()))
        masks.append(float(mask.sum()))
    expected = (sum(per_sample_sum[:3]) / sum(masks[:3]) + sum(per_sample_sum[3:]) / sum(masks[3:])) / n
    assert res["loss"].item() == pytest.approx(expected, rel=1e-5)
    ours = sum(a / m for a, m in zip(per_sample_sum, masks)) / n
    assert ours == pytest.approx(setup["out"]["policy"]["tempo"]["loss"].item(), rel=1e-5)
    assert abs(expected - ours) > 1e-3


def test_tppo_value_loss_through_slimes_dispatcher(setup):
    """The critic: tppo.init rebinds slime's value_loss_function; slime's PPO GAE with gamma = lambd = 1
    gives returns = R; slime's loss_function (value_loss) = mean over samples of TPPO's BCE of
    z_t = cumsum(m f), V = sigmoid(z), against R: by hand, by value_bce_loss, and in the gradients of
    the logits (by hand) and of the critic's parameters (our autograd on the local ValueModel)."""
    from tempo_plugin.critic.value_model import token_increments

    res, samples, critic = setup["out"]["critic"], setup["critic_samples"], setup["critic"]
    n = len(samples)
    assert sorted(res["metrics"]) == ["tppo_value_mean", "value_loss"]
    for ret, s in zip(res["returns"], samples):
        torch.testing.assert_close(ret, torch.full_like(ret, s["reward"]), rtol=0, atol=1e-6)

    # by hand on slime's head outputs
    by_hand, grad_by_hand, v_mean = 0.0, torch.zeros_like(res["logits"]), 0.0
    end = 0
    for s in samples:
        end += len(s["tokens"])
        p, r = s["prompt_length"], s["reward"]
        start = end - (len(s["tokens"]) - p)
        f = res["logits"][0, start - 1 : end - 1, 0].double()
        m = torch.tensor(s["loss_mask"][p:], dtype=torch.float64)
        z = torch.cumsum(m * f, 0)
        v = torch.sigmoid(z)
        bce = torch.nn.functional.softplus(z) - r * z  # -[R log V + (1 - R) log(1 - V)]
        by_hand += float((m * bce).sum() / m.sum()) / n
        v_mean += float((m * v).sum() / m.sum())
        residual_tail = torch.flip(torch.cumsum(torch.flip(m * (v - r), [0]), 0), [0])  # sum_{t >= j}
        grad_by_hand[0, start - 1 : end - 1, 0] = (m * residual_tail / m.sum() / n).float()
    assert 0 < sum(1 for s in samples if 0 in s["loss_mask"][s["prompt_length"]:])  # masked tokens inside
    assert res["loss"].item() == pytest.approx(by_hand, rel=1e-5)
    assert res["metrics"]["value_loss"] == pytest.approx(n * by_hand, rel=1e-5)
    assert res["metrics"]["tppo_value_mean"] == pytest.approx(v_mean, rel=1e-5)
    torch.testing.assert_close(res["logits_grad"], grad_by_hand, rtol=1e-4, atol=1e-8)

    # our TPPO loss on the local critic (ValueModel + token_increments): value and parameter gradients
    critic.train()
    critic.zero_grad(set_to_none=True)
    ours = 0.0
    for s in samples:
        ids = torch.tensor([s["tokens"]])
        f = token_increments(critic, ids, torch.ones_like(ids))[0, s["prompt_length"]:]
        mask = torch.tensor(s["loss_mask"][s["prompt_length"]:], dtype=torch.float32)
        loss = value_bce_loss(f, s["reward"], mask) / n
        loss.backward()
        ours += loss.item()
    critic.eval()
    our_grads = {name: p.grad.detach().clone() for name, p in critic.named_parameters() if p.grad is not None}
    critic.zero_grad(set_to_none=True)
    assert res["loss"].item() == pytest.approx(ours, rel=1e-5)
    assert_grads_close(res["param_grads"], our_grads)
